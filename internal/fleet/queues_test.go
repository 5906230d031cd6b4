package fleet

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/retry"
)

func TestQueues(t *testing.T) {
	tiers := retry.Tiers{5 * time.Second, 2 * time.Minute}
	names := QueueNames{JobsTopic: "jobs", WorkerGroup: "workers", RetryTiers: tiers, RetryPrefix: "retry", SchedulerGroup: "sched"}
	noTiers := QueueNames{JobsTopic: "jobs", WorkerGroup: "workers"}
	// Two workers: w-b holds partitions 2 and 0 (listed out of order), w-a
	// partition 1; partition 3 has no member (a rebalance under way).
	workers := membership{State: "Stable", Members: []GroupMember{
		{MemberID: "m-2", ClientID: "w-b", ClientHost: "/10.0.0.8", Assigned: map[string][]int{"jobs": {0, 2}}},
		{MemberID: "m-1", ClientID: "w-a", ClientHost: "/10.0.0.7", Assigned: map[string][]int{"jobs": {1}}},
	}}
	jobsLag := map[int]int64{3: 7, 0: 5, 2: 0, 1: 3}
	schedLags := map[string]map[int]int64{"retry.5s": {0: 1, 1: 2}, "retry.2m": {0: 0, 1: 4}}
	wantWorkers := GroupLag{Group: "workers", State: "Stable", Total: 15,
		Topics: []TopicLag{{Topic: "jobs", Total: 15, Partitions: []PartitionLag{
			{Partition: 0, Lag: 5, Member: "w-b@10.0.0.8"}, {Partition: 1, Lag: 3, Member: "w-a@10.0.0.7"},
			{Partition: 2, Lag: 0, Member: "w-b@10.0.0.8"}, {Partition: 3, Lag: 7},
		}}},
		Members: []GroupMember{workers.Members[1], workers.Members[0]},
	}
	errDown := errors.New("broker down")

	tests := []struct {
		name    string
		names   QueueNames
		groups  *fakeGroups
		want    Queues
		wantErr string // a *GroupLagError's text
		sched   bool   // the error is the scheduler's
	}{
		{
			name:  "workers only, without tiers",
			names: noTiers,
			groups: &fakeGroups{members: map[string]membership{"workers": workers},
				lags: map[string]map[string]map[int]int64{"workers": {"jobs": jobsLag}}},
			want: Queues{Workers: wantWorkers},
		},
		{
			name:  "workers, and the scheduler's lag per tier",
			names: names,
			groups: &fakeGroups{members: map[string]membership{"workers": workers, "sched": {State: "Empty"}},
				lags: map[string]map[string]map[int]int64{"workers": {"jobs": jobsLag}, "sched": schedLags}},
			want: Queues{Workers: wantWorkers,
				Scheduler: &GroupLag{Group: "sched", State: "Empty", Total: 7, Members: []GroupMember{}, Topics: []TopicLag{
					{Topic: "retry.5s", Total: 3, Partitions: []PartitionLag{{Partition: 0, Lag: 1}, {Partition: 1, Lag: 2}}},
					{Topic: "retry.2m", Total: 4, Partitions: []PartitionLag{{Partition: 0, Lag: 0}, {Partition: 1, Lag: 4}}},
				}},
				Tiers: []TierWaiting{
					{Tier: 5 * time.Second, Name: "5s", Topic: "retry.5s", Waiting: 3},
					{Tier: 2 * time.Minute, Name: "2m", Topic: "retry.2m", Waiting: 4},
				}},
		},
		{
			name:   "a group Kafka does not know: no state, no members, lag from the first offsets",
			names:  noTiers,
			groups: &fakeGroups{lags: map[string]map[string]map[int]int64{"workers": {"jobs": {0: 4}}}},
			want: Queues{Workers: GroupLag{Group: "workers", Total: 4, Members: []GroupMember{},
				Topics: []TopicLag{{Topic: "jobs", Total: 4, Partitions: []PartitionLag{{Partition: 0, Lag: 4}}}}}},
		},
		{
			name:    "describing the workers' group fails",
			names:   names,
			groups:  &fakeGroups{errs: map[string]error{"workers": errDown}},
			wantErr: "lag of group workers on the jobs topic: describe group: broker down",
		},
		{
			name:  "a delay topic's lag fails",
			names: names,
			groups: &fakeGroups{members: map[string]membership{"workers": workers},
				lags: map[string]map[string]map[int]int64{"workers": {"jobs": jobsLag}, "sched": schedLags},
				errs: map[string]error{"sched/retry.2m": errDown}},
			wantErr: "lag of group sched on the delay topics: broker down",
			sched:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reader{names: tt.names, groups: tt.groups}
			got, err := r.Queues(t.Context())
			if tt.groups.opened != 1 || tt.groups.closed != 1 {
				t.Errorf("connections opened %d, closed %d; want one, closed", tt.groups.opened, tt.groups.closed)
			}
			if tt.wantErr != "" {
				var ge *GroupLagError
				if !errors.As(err, &ge) || err.Error() != tt.wantErr || ge.Scheduler != tt.sched || !errors.Is(err, errDown) {
					t.Fatalf("error %v, want a *GroupLagError %q (scheduler %v) wrapping the cause", err, tt.wantErr, tt.sched)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestQueuesNotConfigured(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Queues(t.Context()); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("Queues without Kafka: %v, want ErrNotConfigured", err)
	}
}

func TestQueueNamesValidate(t *testing.T) {
	tiers := retry.Tiers{5 * time.Second}
	tests := []struct {
		name    string
		names   QueueNames
		wantErr string // "" for valid
	}{
		{"jobs only", QueueNames{JobsTopic: "j", WorkerGroup: "w"}, ""},
		{"with tiers", QueueNames{JobsTopic: "j", WorkerGroup: "w", RetryTiers: tiers, RetryPrefix: "r", SchedulerGroup: "s"}, ""},
		{"no jobs topic", QueueNames{WorkerGroup: "w"}, "JobsTopic is empty"},
		{"blank worker group", QueueNames{JobsTopic: "j", WorkerGroup: " "}, "WorkerGroup is empty"},
		{"tiers without a scheduler group", QueueNames{JobsTopic: "j", WorkerGroup: "w", RetryTiers: tiers, RetryPrefix: "r"}, "SchedulerGroup is empty"},
		{"tiers without a prefix", QueueNames{JobsTopic: "j", WorkerGroup: "w", RetryTiers: tiers, SchedulerGroup: "s"}, "RetryPrefix is empty"},
		{"tiers out of order", QueueNames{JobsTopic: "j", WorkerGroup: "w", RetryTiers: retry.Tiers{time.Minute, time.Second},
			RetryPrefix: "r", SchedulerGroup: "s"}, "ascending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{Kafka: testCluster(t), Queues: tt.names})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("New: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("New: %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
}
