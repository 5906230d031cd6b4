// Package config loads a binary's settings from environment variables and
// command-line flags into a typed struct, so every setting has one name, one
// default and one line of documentation.
//
// A setting is a struct field tagged with its environment variable, its
// default and its meaning:
//
//	Lease time.Duration `env:"POSTLINE_LEASE" default:"30s" usage:"how long a claim is reserved"`
//
// The flag name is derived from the variable: POSTLINE_LEASE becomes --lease.
// A flag given on the command line wins over the environment, which wins over
// the default. A value that does not parse fails with an error naming the
// variable, the flag and the value. Semantic checks (ranges, required pairs)
// belong to the Validate methods of the packages that use the settings.
//
// Only cmd/ packages use config; everything else receives typed Config
// structs.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/postline/postline/internal/configerr"
)

// Setting describes one loadable field, for usage text and the README.
type Setting struct {
	Env     string
	Flag    string
	Default string
	Usage   string
}

// Load fills dst, a pointer to a struct of tagged fields, from getenv and
// args. Nested structs without an env tag are walked. It returns
// flag.ErrHelp after printing usage to out when args ask for help.
func Load(dst any, name string, args []string, getenv func(string) string, out io.Writer) error {
	fields, err := settings(dst)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flagValues := make([]*string, len(fields))
	for i, f := range fields {
		flagValues[i] = fs.String(f.Flag, "", f.Usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			PrintUsage(out, name, dst)
			return err
		}
		return fmt.Errorf("%s: %w (run with -h for the settings)", name, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var errs []error
	for i, f := range fields {
		raw, source := f.Default, "default"
		if v := getenv(f.Env); v != "" {
			raw, source = v, f.Env
		}
		if set[f.Flag] {
			raw, source = *flagValues[i], "--"+f.Flag
		}
		if err := assign(f.value, raw); err != nil {
			errs = append(errs, fmt.Errorf("setting %s (--%s): invalid value %q from %s: %w", f.Env, f.Flag, raw, source, err))
		}
	}
	return errors.Join(errs...)
}

// Settings lists the settings of dst in declaration order.
func Settings(dst any) ([]Setting, error) {
	fields, err := settings(dst)
	if err != nil {
		return nil, err
	}
	out := make([]Setting, len(fields))
	for i, f := range fields {
		out[i] = f.Setting
	}
	return out, nil
}

// PrintUsage writes a table of the settings of dst to w.
func PrintUsage(w io.Writer, name string, dst any) {
	list, err := Settings(dst)
	if err != nil {
		fmt.Fprintf(w, "%s: %v\n", name, err)
		return
	}
	fmt.Fprintf(w, "Usage: %s [flags]\n\nEvery setting is an environment variable or a flag (the flag wins).\n\n", name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tFLAG\tDEFAULT\tMEANING")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t--%s\t%s\t%s\n", s.Env, s.Flag, s.Default, s.Usage)
	}
	_ = tw.Flush()
}

type field struct {
	Setting
	value reflect.Value
}

func settings(dst any) ([]field, error) {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("config: want a pointer to a struct, got %T", dst)
	}
	var out []field
	var walk func(v reflect.Value) error
	walk = func(v reflect.Value) error {
		t := v.Type()
		for i := range t.NumField() {
			sf, fv := t.Field(i), v.Field(i)
			key, ok := sf.Tag.Lookup("env")
			if !ok {
				if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[time.Time]() && sf.IsExported() {
					if err := walk(fv); err != nil {
						return err
					}
				}
				continue
			}
			if !isSupported(sf.Type) {
				return fmt.Errorf("config: field %s has unsupported type %s", sf.Name, sf.Type)
			}
			out = append(out, field{
				Setting: Setting{
					Env:     key,
					Flag:    flagName(key),
					Default: sf.Tag.Get("default"),
					Usage:   sf.Tag.Get("usage"),
				},
				value: fv,
			})
		}
		return nil
	}
	return out, walk(v.Elem())
}

// flagName turns POSTLINE_SMTP_HOST into smtp-host.
func flagName(env string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "POSTLINE_")), "_", "-")
}

var durationType = reflect.TypeFor[time.Duration]()

func isSupported(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		return true
	case reflect.Slice:
		return t.Elem().Kind() == reflect.String
	}
	return false
}

func assign(v reflect.Value, raw string) error {
	if v.Type() == durationType {
		if raw == "" {
			v.SetInt(0)
			return nil
		}
		d, err := time.ParseDuration(raw)
		if err != nil {
			return errors.New("want a duration such as 500ms or 30s")
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Bool:
		if raw == "" {
			v.SetBool(false)
			return nil
		}
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return errors.New("want true or false")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		if raw == "" {
			v.SetInt(0)
			return nil
		}
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return errors.New("want an integer")
		}
		v.SetInt(n)
	case reflect.Float64:
		if raw == "" {
			v.SetFloat(0)
			return nil
		}
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return errors.New("want a number")
		}
		v.SetFloat(f)
	case reflect.Slice:
		var parts []string
		for p := range strings.SplitSeq(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	}
	return nil
}

// NameSetting prefixes a component's configuration error with the setting it
// is about: components name their Config fields (configerr.FieldError),
// operators know variables. fields maps Config field names to settings; the
// first field error in err (errors.As order) whose field is mapped wins. An
// error that names no mapped field is prefixed "settings:".
func NameSetting(err error, fields map[string]string) error {
	for _, fe := range configerr.Fields(err) {
		if name, ok := fields[fe.Field]; ok {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	return fmt.Errorf("settings: %w", err)
}

// Undocumented returns the settings of dst that have no row in the table
// under the "## section" heading of a Markdown reference page, as
// "POSTLINE_X (--x)": a row that only another section holds does not count.
// The reference pages are the operators' source of truth, so each binary's
// tests check them with this.
func Undocumented(dst any, doc []byte, section string) ([]string, error) {
	_, body, ok := strings.Cut(string(doc), "\n## "+section+"\n")
	if !ok {
		return nil, fmt.Errorf("no %q section", "## "+section)
	}
	body, _, _ = strings.Cut(body, "\n## ")
	list, err := Settings(dst)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, s := range list {
		if !strings.Contains(body, "\n| `"+s.Env+"` | `--"+s.Flag+"` |") {
			missing = append(missing, s.Env+" (--"+s.Flag+")")
		}
	}
	return missing, nil
}
