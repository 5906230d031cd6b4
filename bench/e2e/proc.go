package main

import (
	"path/filepath"

	"github.com/postline/postline/bench/internal/benchproc"
)

// proc is a binary running under `/usr/bin/time -v -o <file>`. GNU time
// dies on SIGTERM without writing its report, so it runs as a Wrapper:
// Stop signals the binary itself (time's child) and lets time exit on its
// own.
type proc struct {
	*benchproc.Proc
	timePath string
}

// startProc starts argv under timeBin, with env added to the harness's
// environment (later entries win) and the output in dir/name.log.
func startProc(timeBin, dir, name string, argv, env []string) (*proc, error) {
	timePath := filepath.Join(dir, name+".time")
	p, err := benchproc.Start(benchproc.Spec{Name: name, Bin: timeBin, Args: append([]string{"-v", "-o", timePath}, argv...),
		Env: env, LogPath: filepath.Join(dir, name+".log"), Wrapper: true})
	if err != nil {
		return nil, err
	}
	return &proc{Proc: p, timePath: timePath}, nil
}

// usage reads time's report; call it after the process has exited.
func (p *proc) usage() (usage, error) {
	return readTimeV(p.timePath)
}
