// Command naive is the baseline that the end-to-end benchmark (bench/e2e)
// measures the Postline worker against: the mail worker a first-time author
// would write. It is not used in production and owns nothing else.
//
// Per Kafka record, in order and with nothing batched or pooled except the
// PostgreSQL connections:
//
//  1. FetchMessage from a kafka-go Reader in a consumer group;
//  2. job.Decode;
//  3. one transaction: SELECT the row FOR UPDATE, insert it as sending (or
//     skip it when it is already sent), commit;
//  4. a new go-mail Client and connection: dial, send, close;
//  5. a second transaction marking the row sent with sent_at = now();
//  6. CommitMessages for that one record.
//
// It writes the same postline_messages table as the worker (the schema of
// schema.Migrate) and records enqueued_at from the same first-seen
// header, so publish-to-accept latency (sent_at - enqueued_at) means the same
// thing for both. --naive-concurrency goroutines (default 1: sequential) share
// the one Reader. It is honest rather than deliberately slow: no sleeps, no
// extra round trips beyond the ones listed.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/wneessen/go-mail"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/supervisor"
	"github.com/postline/postline/job"
)

func main() { supervisor.Main("naive", run) }

// settings share their names with cmd/worker's where they overlap.
type settings struct {
	Brokers     []string `env:"POSTLINE_KAFKA_BROKERS" default:"127.0.0.1:9092" usage:"Kafka bootstrap brokers, comma-separated"`
	JobsTopic   string   `env:"POSTLINE_JOBS_TOPIC" default:"mail.jobs" usage:"topic the jobs are consumed from"`
	Group       string   `env:"POSTLINE_CONSUMER_GROUP" default:"postline-naive" usage:"Kafka consumer group"`
	DatabaseURL string   `env:"POSTLINE_DATABASE_URL" default:"postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable" usage:"PostgreSQL URL (postline_messages table)"`
	SMTPHost    string   `env:"POSTLINE_SMTP_HOST" default:"127.0.0.1" usage:"SMTP relay host"`
	SMTPPort    int      `env:"POSTLINE_SMTP_PORT" default:"1025" usage:"SMTP relay port"`
	Concurrency int      `env:"POSTLINE_NAIVE_CONCURRENCY" default:"1" usage:"goroutines fetching and sending (1: sequential)"`
	LogLevel    string   `env:"POSTLINE_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var s settings
	if err := config.Load(&s, "naive", args, getenv, stdout); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.LogLevel)); err != nil {
		return fmt.Errorf("setting POSTLINE_LOG_LEVEL: invalid value %q", s.LogLevel)
	}
	if s.Concurrency < 1 {
		return fmt.Errorf("setting POSTLINE_NAIVE_CONCURRENCY: %d must be at least 1", s.Concurrency)
	}
	logger := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: level}))

	poolCfg, err := pgxpool.ParseConfig(s.DatabaseURL)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_DATABASE_URL: %w", err)
	}
	// One connection per goroutine: each holds at most one transaction.
	poolCfg.MaxConns = int32(s.Concurrency)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("postgres pool: %w", err)
	}
	defer pool.Close()
	if err := schema.Migrate(ctx, pool); err != nil {
		return err
	}

	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     s.Brokers,
		Topic:       s.JobsTopic,
		GroupID:     s.Group,
		StartOffset: kafka.FirstOffset,
	})
	defer reader.Close()

	w := &worker{
		settings: s,
		logger:   logger,
		pool:     pool,
		reader:   reader,
		owner:    ownerName(),
		tls:      tlsPolicy(s.SMTPHost),
	}
	logger.Info("naive worker started", "topic", s.JobsTopic, "group", s.Group,
		"smtp", net.JoinHostPort(s.SMTPHost, fmt.Sprint(s.SMTPPort)), "concurrency", s.Concurrency)

	var g errgroup.Group
	for range s.Concurrency {
		g.Go(func() error { return w.loop(ctx) })
	}
	err = g.Wait()
	logger.Info("naive worker stopped", "sent", w.sent.Load(), "failed", w.failed.Load(), "error", err)
	return err
}

// worker holds what the goroutines share.
type worker struct {
	settings
	logger *slog.Logger
	pool   *pgxpool.Pool
	reader *kafka.Reader
	owner  string
	tls    mail.TLSPolicy

	sent, failed atomic.Int64
}

// loop handles one record at a time until ctx ends. A record that was
// fetched is finished even when ctx ends meanwhile.
func (w *worker) loop(ctx context.Context) error {
	for {
		m, err := w.reader.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("fetch: %w", err)
		}
		work := context.WithoutCancel(ctx)
		if err := w.handle(work, m); err != nil {
			return err
		}
		if err := w.reader.CommitMessages(work, m); err != nil {
			return fmt.Errorf("commit offset %d of partition %d: %w", m.Offset, m.Partition, err)
		}
	}
}

// handle delivers one record. Errors it returns stop the worker; a job that
// cannot be delivered is logged, marked failed and skipped.
func (w *worker) handle(ctx context.Context, m kafka.Message) error {
	j, err := job.Decode(m.Value, job.Limits{})
	if err != nil {
		w.logger.Warn("invalid job; skipping", "partition", m.Partition, "offset", m.Offset, "error", err)
		return nil
	}
	enqueued, ok := jobheader.FirstSeen(m.Headers)
	if !ok {
		enqueued = m.Time
	}
	claimed, err := w.claim(ctx, &j, enqueued)
	if err != nil {
		return err
	}
	if !claimed {
		return nil
	}
	sendErr := w.send(ctx, &j)
	status, lastError := "sent", ""
	if sendErr != nil {
		status, lastError = "failed", sendErr.Error()
		w.failed.Add(1)
		w.logger.Warn("send failed", "message_id", j.MessageID, "error", sendErr)
	} else {
		w.sent.Add(1)
	}
	return w.finish(ctx, j.MessageID, status, lastError)
}

// claim is the first transaction: it inserts the row as sending, or reports
// false when the row is already sent or failed (a redelivery).
func (w *worker) claim(ctx context.Context, j *job.Job, enqueued time.Time) (bool, error) {
	claimed := false
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM postline_messages WHERE message_id = $1 FOR UPDATE`,
			j.MessageID).Scan(&status)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			_, err = tx.Exec(ctx, `INSERT INTO postline_messages
				(message_id, status, version, attempt, payload_hash, lease_owner, priority, tenant, enqueued_at)
				VALUES ($1, 'sending', 1, 1, $2, $3, NULLIF($4, ''), NULLIF($5, ''), $6)`,
				j.MessageID, j.Hash(), w.owner, string(j.Priority), j.Tenant, enqueued)
			claimed = err == nil
			return err
		case err != nil:
			return err
		case status == "sent" || status == "failed":
			return nil
		default:
			_, err = tx.Exec(ctx, `UPDATE postline_messages SET status = 'sending',
				version = version + 1, lease_owner = $2, updated_at = now() WHERE message_id = $1`,
				j.MessageID, w.owner)
			claimed = err == nil
			return err
		}
	})
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", j.MessageID, err)
	}
	return claimed, nil
}

// send opens a new connection for this one message and closes it.
func (w *worker) send(ctx context.Context, j *job.Job) error {
	msg, err := sender.Message(j)
	if err != nil {
		return err
	}
	c, err := mail.NewClient(w.SMTPHost, mail.WithPort(w.SMTPPort), mail.WithTLSPolicy(w.tls))
	if err != nil {
		return err
	}
	return c.DialAndSendWithContext(ctx, msg)
}

// finish is the second transaction: it records the outcome.
func (w *worker) finish(ctx context.Context, id, status, lastError string) error {
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE postline_messages SET status = $2, version = version + 1,
			lease_owner = NULL, last_error = NULLIF($3, ''),
			sent_at = CASE WHEN $2 = 'sent' THEN now() END, updated_at = now()
			WHERE message_id = $1`, id, status, lastError)
		return err
	})
	if err != nil {
		return fmt.Errorf("record %s as %s: %w", id, status, err)
	}
	return nil
}

// tlsPolicy is plaintext for a loopback sink (smtp-sink speaks no TLS) and
// mandatory TLS anywhere else.
func tlsPolicy(host string) mail.TLSPolicy {
	if host == "localhost" {
		return mail.NoTLS
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return mail.NoTLS
	}
	return mail.TLSMandatory
}

func ownerName() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("naive-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
