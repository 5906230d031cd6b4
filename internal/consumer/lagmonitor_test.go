package consumer

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

func TestLagMonitorConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  LagMonitorConfig
		ok   bool
	}{
		{"complete", LagMonitorConfig{Kafka: testenv.KafkaCluster("b:9092"), Topic: "t", GroupID: "g"}, true},
		{"no brokers", LagMonitorConfig{Topic: "t", GroupID: "g"}, false},
		{"no topic", LagMonitorConfig{Kafka: testenv.KafkaCluster("b:9092"), GroupID: "g"}, false},
		{"no group", LagMonitorConfig{Kafka: testenv.KafkaCluster("b:9092"), Topic: "t"}, false},
		{"negative interval", LagMonitorConfig{Kafka: testenv.KafkaCluster("b:9092"), Topic: "t", GroupID: "g", Interval: -time.Second}, false},
	}
	for _, tt := range tests {
		_, err := NewLagMonitor(tt.cfg, testLogger(t), nil)
		if (err == nil) != tt.ok {
			t.Errorf("%s: NewLagMonitor = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestSendingMembers(t *testing.T) {
	tests := []struct {
		name     string
		assigned [][]int
		lag      map[int]int64
		want     int
	}{
		{"no group", nil, map[int]int64{0: 5}, 0},
		{"both have mail", [][]int{{0, 1}, {2, 3}}, map[int]int64{0: 1, 3: 9}, 2},
		{"one ran dry", [][]int{{0, 1}, {2, 3}}, map[int]int64{0: 0, 1: 0, 2: 4}, 1},
		{"caught up: every member", [][]int{{0}, {1}, {2}}, map[int]int64{0: 0, 1: 0, 2: 0}, 3},
		{"a member without partitions has no mail", [][]int{{0, 1, 2}, nil}, map[int]int64{1: 3}, 1},
	}
	for _, tt := range tests {
		if got := sendingMembers(tt.assigned, tt.lag); got != tt.want {
			t.Errorf("%s: sendingMembers = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// The monitor reports the whole group's lag across partitions and its live
// membership, on the real broker: everything is lag before the group
// commits, and lag falls to zero once a member has consumed and committed.
func TestIntegrationLagMonitor(t *testing.T) {
	testenv.Integration(t, "Kafka")
	const partitions, per = 3, 40
	topic := testenv.NewTopic(t, partitions)
	brokers := testenv.KafkaBrokers()
	began := time.Now()
	produce(t, brokers, topic, partitions, per)
	cfg := integrationConfig(topic)

	reg := prometheus.NewRegistry()
	mon, err := NewLagMonitor(LagMonitorConfig{Kafka: testenv.KafkaCluster(brokers...), Topic: topic, GroupID: cfg.GroupID, Interval: 200 * time.Millisecond}, testLogger(t), reg)
	if err == nil {
		t.Cleanup(mon.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := mon.Refresh(t.Context()); err != nil {
		t.Fatalf("refresh before the group exists: %v", err)
	}
	if total, per, _ := mon.Lag(); total != partitions*40 || len(per) != partitions {
		t.Fatalf("lag before any commit = %d over %v, want %d over %d partitions", total, per, partitions*40, partitions)
	}
	// The oldest waiting record is the first one produced: its timestamp is
	// at or after the test started and in the past.
	oldest, ok := mon.OldestWaiting()
	if !ok || oldest.Before(began.Add(-time.Second)) || oldest.After(time.Now()) {
		t.Errorf("OldestWaiting = %v, %v; want a time between %v and now", oldest, ok, began)
	}
	if age := testutil.ToFloat64(mon.oldestGauge); age <= 0 || age > time.Since(began).Seconds()+1 {
		t.Errorf("oldest_waiting_seconds = %v, want within (0, %v]", age, time.Since(began).Seconds()+1)
	}

	r := start(t, cfg)
	col := collect(r.Consumer, r.MarkDone)
	testkit.Eventually(t, 30*time.Second, "all messages consumed", func() bool { return col.distinct() == partitions*per })
	testkit.Eventually(t, 30*time.Second, "lag zero with one member", func() bool {
		if err := mon.Refresh(t.Context()); err != nil {
			return false
		}
		total, _, _ := mon.Lag()
		return total == 0 && mon.Members() == 1
	})
	if got := mon.SendingMembers(); got != 1 {
		t.Errorf("SendingMembers of a caught-up group of one = %d, want 1 (every member)", got)
	}
	if got := testutil.ToFloat64(mon.membersGauge); got != 1 {
		t.Errorf("group_members = %v, want 1", got)
	}
	if err := CheckAssigned(t.Context(), mon.client, cfg.GroupID, topic, partitions); err != nil {
		t.Errorf("CheckAssigned with one member owning every partition: %v", err)
	}
	if err := CheckAssigned(t.Context(), mon.client, cfg.GroupID, topic, partitions+1); err == nil {
		t.Error("CheckAssigned accepted a partition count the group does not own")
	}
	if _, ok := mon.OldestWaiting(); ok || testutil.ToFloat64(mon.oldestGauge) != 0 {
		t.Errorf("caught up, yet OldestWaiting reports a record (gauge %v)", testutil.ToFloat64(mon.oldestGauge))
	}
	if n := testutil.CollectAndCount(mon.lagGauge); n != partitions {
		t.Errorf("group_lag has %d series, want one per partition (%d)", n, partitions)
	}
	r.stop(t)
	col.wg.Wait()
}

// Two members of a real group, each holding its partitions' records
// without committing: the monitor reads both assignments from the broker,
// and both members have mail to send. Once one member's partitions are
// committed to the end, only the other one has.
func TestIntegrationSendingMembers(t *testing.T) {
	testenv.Integration(t, "Kafka")
	const partitions, per = 4, 20
	topic := testenv.NewTopic(t, partitions)
	brokers := testenv.KafkaBrokers()
	produce(t, brokers, topic, partitions, per)
	cfg := integrationConfig(topic)
	mon, err := NewLagMonitor(LagMonitorConfig{Kafka: testenv.KafkaCluster(brokers...), Topic: topic, GroupID: cfg.GroupID, Interval: time.Second}, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mon.Close)

	a := start(t, cfg)
	var heldA []Message
	var mu sync.Mutex
	colA := collect(a.Consumer, func(m Message) { mu.Lock(); heldA = append(heldA, m); mu.Unlock() })
	b := start(t, cfg)
	colB := collect(b.Consumer, func(Message) {}) // b holds everything it gets
	testkit.Eventually(t, 60*time.Second, "two members, each with partitions", func() bool {
		return len(a.Assigned()) > 0 && len(b.Assigned()) > 0 && len(a.Assigned())+len(b.Assigned()) == partitions
	})
	testkit.Eventually(t, 30*time.Second, "both members sending", func() bool {
		return mon.Refresh(t.Context()) == nil && mon.Members() == 2 && mon.SendingMembers() == 2
	})
	// a finishes what it holds: its partitions are committed to the end.
	testkit.Eventually(t, 30*time.Second, "a holds its partitions' records", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heldA) == per*len(a.Assigned())
	})
	mu.Lock()
	for _, m := range heldA {
		a.MarkDone(m)
	}
	mu.Unlock()
	testkit.Eventually(t, 30*time.Second, "only b sending", func() bool {
		return mon.Refresh(t.Context()) == nil && mon.Members() == 2 && mon.SendingMembers() == 1
	})
	a.stop(t)
	b.stop(t)
	colA.wg.Wait()
	colB.wg.Wait()
}
