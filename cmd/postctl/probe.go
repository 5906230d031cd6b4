package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newProbeCmd is a health check for images without a shell or curl (the
// distroless one): docker-compose runs `postctl probe URL` against a
// worker's or scheduler's /readyz.
func newProbeCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Exit 0 when URL (a /healthz or /readyz endpoint) answers 200, 1 otherwise",
		Long: "Probe GETs URL and exits 0 when it answers 200 OK, 1 otherwise, printing the answer.\n" +
			"It needs no Kafka or PostgreSQL: it is the health check of the distroless image.\n" +
			"JSON output: {\"url\": ..., \"status\": 200, \"body\": ...}.",
		Args: cobra.ExactArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error {
			u, err := url.Parse(args[0])
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usagef("probe %q: want an http:// or https:// URL", args[0])
			}
			if timeout <= 0 {
				return usagef("--timeout %s must be positive", timeout)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			client := &http.Client{Timeout: timeout}
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, args[0], nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return fmt.Errorf("probe %s: %w", args[0], err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			text := strings.TrimSpace(string(body))
			if err := g.print(map[string]any{"url": args[0], "status": resp.StatusCode, "body": text},
				fmt.Sprintf("%s: %s %s", args[0], resp.Status, text)); err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("probe %s: %s", args[0], resp.Status)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
