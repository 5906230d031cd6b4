package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/mailquery"
)

// purgeInterval is how often indexed events past their retention are
// deleted: the table grows by a day's events between purges at most.
const purgeInterval = time.Hour

// index waits for Kafka, then copies the events into postline_mail_events
// until ctx ends. The pages work meanwhile: a mail's life then shows what
// its row says.
func index(ctx context.Context, cluster *kafkaclient.Cluster, indexer *mailquery.Indexer, logger *slog.Logger) error {
	if err := cluster.AwaitLogged(ctx, logger); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	return indexer.Run(ctx)
}

// purgeEvents deletes indexed events older than retention now and every
// purgeInterval until ctx ends. Every replica purges; a purge that finds
// nothing to delete costs one indexed read.
func purgeEvents(ctx context.Context, indexer *mailquery.Indexer, retention time.Duration, logger *slog.Logger) error {
	ticker := time.NewTicker(purgeInterval)
	defer ticker.Stop()
	for {
		n, err := indexer.Purge(ctx, retention)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("purging indexed events failed; trying again at the next interval", "error", err, "interval", purgeInterval)
		case n > 0:
			logger.Info("purged indexed events", "events", n, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
