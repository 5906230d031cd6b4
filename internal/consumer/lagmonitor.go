package consumer

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/kafkaclient"

	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/metricreg"
)

// DefaultLagInterval is how often a LagMonitor refreshes by default.
const DefaultLagInterval = 5 * time.Second

// LagMonitorConfig configures a LagMonitor.
type LagMonitorConfig struct {
	// Kafka is the cluster the topic is on. Required.
	Kafka *kafkaclient.Cluster
	// Topic is the consumed topic. Required.
	Topic string
	// GroupID is the consumer group. Required.
	GroupID string
	// Interval is how often lag and membership are refreshed. Defaults to
	// DefaultLagInterval.
	Interval time.Duration
	// Timeout bounds one refresh. Defaults to Interval.
	Timeout time.Duration
}

// LagMonitor keeps the whole group's lag on a topic (every partition, not
// only this member's) and the group's live membership, refreshed every
// Interval, and exports them as metrics. It is the input adaptive backoff and
// fleet-wide rate sharing read; kafka.Reader's own lag is per fetch and not
// fit for either.
type LagMonitor struct {
	cfg         LagMonitorConfig
	client      *kafka.Client
	closeClient func()
	logger      *slog.Logger

	mu        sync.Mutex
	lag       map[int]int64
	oldest    time.Time // the oldest record not committed past; zero when caught up
	members   int
	sending   int // members assigned a partition with lag (sendingMembers)
	refreshed time.Time

	lagGauge     *prometheus.GaugeVec
	oldestGauge  prometheus.Gauge
	membersGauge prometheus.Gauge
	errors       prometheus.Counter
}

// NewLagMonitor returns a LagMonitor; call Run to start refreshing.
func NewLagMonitor(cfg LagMonitorConfig, logger *slog.Logger, reg prometheus.Registerer) (*LagMonitor, error) {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultLagInterval)
	cfg.Timeout = cmp.Or(cfg.Timeout, cfg.Interval)
	switch {
	case cfg.Kafka == nil:
		return nil, configerr.Errorf("Kafka", "lag monitor: Kafka is nil")
	case cfg.Topic == "" || cfg.GroupID == "":
		return nil, configerr.Errorf("Topic", "lag monitor: Topic and GroupID are required")
	case cfg.Interval < 0 || cfg.Timeout < 0:
		return nil, configerr.Errorf("Interval", "lag monitor: Interval %s and Timeout %s must be positive", cfg.Interval, cfg.Timeout)
	}
	client, closeClient := cfg.Kafka.Client("lag", cfg.Timeout)
	set := metricreg.NewExclusiveSet(reg, metricsSubsystem)
	m := &LagMonitor{
		cfg:         cfg,
		client:      client,
		closeClient: closeClient,
		logger:      logger,
		lagGauge: set.GaugeVec("group_lag",
			"Records of the topic the whole consumer group has not committed past, per partition (end offset minus committed offset).", "topic", "partition"),
		membersGauge: set.Gauge("group_members", "Live members of the consumer group."),
		errors:       set.Counter("lag_refresh_errors_total", "Failed refreshes of the group's lag or membership."),
	}
	// The oldest record's age is one series per topic: the topic is a
	// constant label.
	m.oldestGauge = metricreg.Add(set, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "oldest_waiting_seconds",
		Help:        "Age of the oldest record of the topic the whole consumer group has not committed past (its Kafka timestamp), at the last refresh; 0 when caught up.",
		ConstLabels: prometheus.Labels{"topic": cfg.Topic},
	}))
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("lag monitor: register metrics: %w", err)
	}
	return m, nil
}

// Close closes the monitor's connections to the brokers; Run closes them
// when it returns. A monitor used only through Refresh must be closed.
func (m *LagMonitor) Close() { m.closeClient() }

// Run refreshes until ctx ends, then returns nil. A failed refresh keeps the
// last known values; it is counted and logged once until a refresh works.
func (m *LagMonitor) Run(ctx context.Context) error {
	defer m.Close()
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	failing := false
	for {
		if err := m.Refresh(ctx); err != nil && ctx.Err() == nil {
			m.errors.Inc()
			if !failing {
				m.logger.Warn("consumer group lag refresh failed; keeping the last values", "error", err)
			}
			failing = true
		} else if failing {
			failing = false
			m.logger.Info("consumer group lag refresh works again")
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
	}
}

// Refresh reads the group's lag and membership once.
func (m *LagMonitor) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	committed, end, err := groupOffsets(ctx, m.client, m.cfg.Topic, m.cfg.GroupID)
	if err != nil {
		return err
	}
	lag := make(map[int]int64, len(end))
	var oldest time.Time
	for p := range end {
		if lag[p] = max(0, end[p]-committed[p]); lag[p] == 0 {
			continue
		}
		at, ok, err := oldestWaiting(ctx, m.client, m.cfg.Topic, p, committed[p])
		if err != nil {
			return fmt.Errorf("oldest waiting record: %w", err)
		}
		if ok && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
		}
	}
	assigned, err := m.describeMembers(ctx)
	if err != nil {
		return err
	}
	members, sending := len(assigned), sendingMembers(assigned, lag)
	now := time.Now()
	m.mu.Lock()
	m.lag, m.oldest, m.members, m.sending, m.refreshed = lag, oldest, members, sending, now
	m.mu.Unlock()
	for p, n := range lag {
		m.lagGauge.WithLabelValues(m.cfg.Topic, strconv.Itoa(p)).Set(float64(n))
	}
	age := 0.0
	if !oldest.IsZero() {
		age = max(0, now.Sub(oldest).Seconds())
	}
	m.oldestGauge.Set(age)
	m.membersGauge.Set(float64(members))
	return nil
}

// OldestWaiting returns the Kafka timestamp of the oldest record the group
// has not committed past, at the last refresh, and false when the group
// was caught up.
func (m *LagMonitor) OldestWaiting() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.oldest, !m.oldest.IsZero()
}

// describeMembers returns the group's live members and, for each, the
// partitions of the topic assigned to it.
func (m *LagMonitor) describeMembers(ctx context.Context) ([][]int, error) {
	res, err := m.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{m.cfg.GroupID}})
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", m.cfg.GroupID, err)
	}
	for _, g := range res.Groups {
		if g.GroupID != m.cfg.GroupID {
			continue
		}
		if g.Error != nil {
			return nil, fmt.Errorf("describe group %s: %w", m.cfg.GroupID, g.Error)
		}
		out := make([][]int, len(g.Members))
		for i, mem := range g.Members {
			for _, t := range mem.MemberAssignments.Topics {
				if t.Topic == m.cfg.Topic {
					out[i] = append(out[i], t.Partitions...)
				}
			}
		}
		return out, nil
	}
	return nil, nil
}

// sendingMembers counts the members assigned a partition with lag: the
// ones with mail still to send. With none (the group is caught up) it is
// every member.
func sendingMembers(assigned [][]int, lag map[int]int64) int {
	n := 0
	for _, parts := range assigned {
		for _, p := range parts {
			if lag[p] > 0 {
				n++
				break
			}
		}
	}
	if n == 0 {
		return len(assigned)
	}
	return n
}

// Lag returns the group's total lag, per partition, and when it was read
// (zero before the first successful refresh).
func (m *LagMonitor) Lag() (total int64, perPartition map[int]int64, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	perPartition = make(map[int]int64, len(m.lag))
	for p, n := range m.lag {
		perPartition[p] = n
		total += n
	}
	return total, perPartition, m.refreshed
}

// Members returns the group's live membership at the last refresh.
func (m *LagMonitor) Members() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.members
}

// SendingMembers returns how many of the group's members had mail to send
// at the last refresh: those assigned a partition of the topic with lag, or
// every member when the group was caught up. They are the ones sharing a
// relay's rate: a member whose partitions ran dry leaves its share to the
// others, so a relay's rate is still used when the backlog is uneven.
func (m *LagMonitor) SendingMembers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sending
}
