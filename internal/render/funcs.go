package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"
)

// funcs returns the functions templates may call, each guarded so that a
// panic becomes an error that does not carry the panic's value.
func funcs(extra map[string]any) map[string]any {
	m := map[string]any{
		"upper":    fnUpper,
		"lower":    fnLower,
		"default":  fnDefault,
		"join":     fnJoin,
		"date":     fnDate,
		"truncate": fnTruncate,
		"printf":   fnPrintf,
	}
	for k, v := range extra {
		m[k] = v
	}
	for k, v := range m {
		m[k] = guard(k, v)
	}
	return m
}

var errorType = reflect.TypeFor[error]()

// guard wraps fn, a function whose last result is an error, so that a
// panic inside it returns ErrPanic instead.
func guard(name string, fn any) any {
	v := reflect.ValueOf(fn)
	t := v.Type()
	if t.Kind() != reflect.Func || t.NumOut() == 0 || t.Out(t.NumOut()-1) != errorType {
		panic(fmt.Sprintf("render: function %s must return an error last", name))
	}
	return reflect.MakeFunc(t, func(args []reflect.Value) (out []reflect.Value) {
		defer func() {
			if r := recover(); r != nil {
				out = make([]reflect.Value, t.NumOut())
				for i := range out {
					out[i] = reflect.Zero(t.Out(i))
				}
				e := reflect.New(errorType).Elem()
				e.Set(reflect.ValueOf(fmt.Errorf("%s: %w", name, ErrPanic)))
				out[len(out)-1] = e
			}
		}()
		if t.IsVariadic() {
			return v.CallSlice(args)
		}
		return v.Call(args)
	}).Interface()
}

func fnUpper(s string) (string, error) { return strings.ToUpper(s), nil }
func fnLower(s string) (string, error) { return strings.ToLower(s), nil }

func fnDefault(def, v any) (any, error) {
	if empty(v) {
		return def, nil
	}
	return v, nil
}

func empty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return rv.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return rv.IsNil()
	default:
		return rv.IsZero()
	}
}

var errNotList = errors.New("argument is not a list")

func fnJoin(sep string, list any) (string, error) {
	if list == nil {
		return "", nil
	}
	rv := reflect.ValueOf(list)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return "", errNotList
	}
	var b strings.Builder
	for i := range rv.Len() {
		if i > 0 {
			b.WriteString(sep)
		}
		fmt.Fprint(&b, rv.Index(i).Interface())
	}
	return b.String(), nil
}

var errNotTime = errors.New("argument is not a time, an RFC 3339 string or Unix seconds")

func fnDate(layout string, v any) (string, error) {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x == nil {
			return "", errNotTime
		}
		t = *x
	case string:
		p, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return "", errNotTime
		}
		t = p
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return "", errNotTime
		}
		t = unix(f)
	case float64:
		t = unix(x)
	case float32:
		t = unix(float64(x))
	case int:
		t = time.Unix(int64(x), 0).UTC()
	case int64:
		t = time.Unix(x, 0).UTC()
	default:
		return "", errNotTime
	}
	return t.Format(layout), nil
}

func unix(f float64) time.Time {
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC()
}

func fnTruncate(n int, s string) (string, error) {
	if n <= 0 {
		return "", nil
	}
	if utf8.RuneCountInString(s) <= n {
		return s, nil
	}
	i, count := 0, 0
	for j := range s {
		if count == n-1 {
			i = j
			break
		}
		count++
	}
	return s[:i] + "…", nil
}

var errFormat = fmt.Errorf("printf format uses '*' or a width or precision over %d", MaxFormatWidth)

// fnPrintf is fmt.Sprintf with bounded widths and precisions, so that a
// short format cannot allocate a huge string.
func fnPrintf(format string, args ...any) (string, error) {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		for i++; i < len(format); i++ {
			c := format[i]
			if c == '*' {
				return "", errFormat
			}
			if c >= '0' && c <= '9' {
				n := 0
				for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
					if n = n*10 + int(format[i]-'0'); n > MaxFormatWidth {
						return "", errFormat
					}
				}
				i--
				continue
			}
			if strings.IndexByte("+-# .[]", c) >= 0 {
				continue
			}
			break
		}
	}
	return fmt.Sprintf(format, args...), nil
}
