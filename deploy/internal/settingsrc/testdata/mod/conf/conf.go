package conf

type Shared struct {
	Inner
	A string `env:"POSTLINE_SHARED"`
}

type Inner struct {
	B string `env:"POSTLINE_INNER"`
}

type Named struct {
	C string `env:"POSTLINE_NAMED"`
}

type Pointer struct {
	C string `env:"POSTLINE_POINTER"`
}

type Declared struct {
	D string `env:"POSTLINE_DECLARED"`
}

type Literal struct {
	E string `env:"POSTLINE_COMPOSITE"`
}

type Unreferenced struct {
	F string `env:"POSTLINE_UNREFERENCED"`
}
