package main

import (
	cfg "example.com/mod/conf"
	"example.com/mod/conf/unused"
)

type settings struct {
	cfg.Shared
	Own     string `env:"POSTLINE_OWN"`
	Named   cfg.Named
	Pointer *cfg.Pointer // config walks no pointers
}

var table = []string{"POSTLINE_LITERAL", "not a setting POSTLINE_X"}

func main() {
	var v cfg.Declared
	_ = v
	_ = &cfg.Literal{}
	_ = unused.X
}
