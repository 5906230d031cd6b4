// Command relay runs the throttling SMTP relay of package bench/relay on
// loopback for manual runs and benchmarks driven from the shell:
//
//	go run ./bench/relay/cmd/relay -rate 200 -conns 10
//
// It prints the address it listens on, optionally the counters every
// -report interval, and the final counters on SIGINT or SIGTERM. It owns
// nothing but reading flags and printing.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/relay"
)

func main() { benchcli.Main("relay", run) }

// options are the command's flags besides the relay's Config.
type options struct {
	report   time.Duration
	bucket   time.Duration
	logLevel slog.Level
}

// parse reads the flags into a relay Config and the command's options.
func parse(args []string, stderr io.Writer) (relay.Config, options, error) {
	var (
		cfg relay.Config
		o   options
	)
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:2526", "loopback host:port to listen on (port 0: any free port)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "capacity R in messages per second (0: unlimited)")
	fs.IntVar(&cfg.Burst, "burst", 0, "token bucket size (0: one second's worth of -rate)")
	fs.IntVar(&cfg.MaxConns, "conns", 0, "connection limit C: 421 at the greeting beyond it (0: unlimited)")
	fs.IntVar(&cfg.HangUpAbove, "hang-up-above", 0, "hang up with 421 at MAIL while more connections than this are open (0: off)")
	fs.StringVar(&cfg.ThrottleAt, "throttle-at", relay.DefaultThrottleAt, "where an empty bucket rejects: RCPT or DATA")
	fs.IntVar(&cfg.ThrottleCode, "throttle-code", relay.DefaultThrottleCode, "reply code when the bucket is empty")
	fs.StringVar(&cfg.ThrottleEnhanced, "throttle-enhanced", relay.DefaultThrottleEnhanced, "enhanced status when the bucket is empty")
	fs.StringVar(&cfg.ThrottleText, "throttle-text", relay.DefaultThrottleText, "reply text when the bucket is empty; "+relay.SecondsPlaceholder+" is the refill time")
	fs.Float64Var(&cfg.TransientDrop, "drop", 0, "share of transactions answered 421 4.4.2 and disconnected")
	fs.Float64Var(&cfg.TransientReply, "transient-reply", 0, "share of transactions answered 451 4.3.0 at the end of DATA, the connection kept")
	fs.Float64Var(&cfg.PermanentReject, "reject", 0, "share of recipient addresses answered 550 5.1.1")
	fs.DurationVar(&cfg.ReplyDelay, "reply-delay", 0, "wait this long before answering each MAIL, RCPT and the final dot (0: at once)")
	fs.DurationVar(&cfg.RoundTripDelay, "round-trip-delay", 0, "wait this long before each write of replies, once per round trip (0: at once)")
	fs.BoolVar(&cfg.Pipelining, "pipelining", false, "advertise PIPELINING (RFC 2920) in the EHLO reply")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed for drops and rejected addresses")
	fs.DurationVar(&o.report, "report", 0, "print the counters at this interval (0: only at exit)")
	fs.DurationVar(&o.bucket, "bucket", time.Second, "interval of the accepted-per-interval series printed at exit")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return relay.Config{}, options{}, err
	}
	if fs.NArg() > 0 {
		return relay.Config{}, options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.report < 0 || o.bucket <= 0 {
		return relay.Config{}, options{}, fmt.Errorf("-report %s must not be negative and -bucket %s must be positive", o.report, o.bucket)
	}
	return cfg, o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	r, err := relay.Start(cfg, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "relay listening on %s\n", r.Addr())

	var tick <-chan time.Time
	if o.report > 0 {
		t := time.NewTicker(o.report)
		defer t.Stop()
		tick = t.C
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick:
			s := r.Stats()
			fmt.Fprintf(stdout, "%s accepted %d throttled %d dropped %d rejected %d refused %d hung_up %d open %d\n",
				time.Since(s.Since).Round(time.Second), s.Accepted, s.Throttled, s.TransientDrops,
				s.PermanentRejects, s.Refused, s.HungUp, s.Open)
		}
	}
	stats := r.Stats()
	closeErr := r.Close()
	printStats(stdout, stats, o.bucket)
	return closeErr
}

// printStats writes the final counters as a table.
func printStats(w io.Writer, s relay.Stats, bucket time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, v any) { fmt.Fprintf(tw, "%s\t%v\n", name, v) }
	row("duration", time.Since(s.Since).Round(time.Millisecond))
	row("connections", s.Connections)
	row("refused (max conns)", s.Refused)
	row("hung up", s.HungUp)
	row("peak open", s.PeakOpen)
	row("attempts", s.Attempts())
	row("accepted", s.Accepted)
	row("throttled", s.Throttled)
	row("transient drops", s.TransientDrops)
	row("transient replies", s.TransientReplies)
	row("permanent rejects", s.PermanentRejects)
	row("transactions", s.Transactions)
	if s.Transactions > 0 {
		row("envelope commands per transaction", fmt.Sprintf("%.2f", s.PerTransaction(s.EnvelopeCommands)))
		row("reply writes per transaction", fmt.Sprintf("%.2f", s.PerTransaction(s.ReplyWrites)))
		row("reads per transaction", fmt.Sprintf("%.2f", s.PerTransaction(s.Reads)))
	}
	if a := s.Attempts(); a > 0 {
		row("deferred share", fmt.Sprintf("%.1f %%", 100*float64(s.Deferred())/float64(a)))
	}
	row(fmt.Sprintf("accepted per %s", bucket), s.AcceptedPer(bucket))
	_ = tw.Flush()
}
