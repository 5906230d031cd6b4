// Command gendashboards writes Postline's Grafana dashboards, built by
// package grafana, as JSON files into a directory, and removes JSON files
// there that it no longer generates. `go generate ./deploy/grafana/...`
// runs it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/postline/postline/deploy/grafana"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gendashboards:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("gendashboards", flag.ContinueOnError)
	out := flags.String("out", "dashboards", "directory to write the dashboard JSON files into")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return errors.New("unexpected arguments; usage: gendashboards [-out dir]")
	}
	files, err := grafana.Generate()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	keep := make(map[string]bool, len(files))
	for _, f := range files {
		keep[f.Name] = true
		path := filepath.Join(*out, f.Name)
		if err := os.WriteFile(path, f.Content, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "wrote", path)
	}
	existing, err := filepath.Glob(filepath.Join(*out, "*.json"))
	if err != nil {
		return err
	}
	for _, path := range existing {
		if keep[filepath.Base(path)] {
			continue
		}
		if err := os.Remove(path); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "removed", path)
	}
	return nil
}
