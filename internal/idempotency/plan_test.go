package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/idempotency"
)

// planBatch is the batch size the plan test sends: large enough that a plan
// visiting a row set once per row of another does n² = 400n row visits.
const planBatch = 400

// TestBatchStatementsStayLinearInGenericPlans runs every batch statement of
// the store on a batch of planBatch rows and, just before each one runs,
// explains it on a second connection with PostgreSQL's generic plan: the
// plan a prepared statement gets after its fifth run, in which an unnest of
// a parameter is guessed at 10 rows. That guess once made the fate
// statement nest a join of two of its own row sets, 65,000 row comparisons
// for a batch of 256, most of PostgreSQL's CPU per mail. No node of any plan
// may visit more than a few rows per row of the batch, on a table autovacuum
// has not analyzed yet (a new schema, a benchmark's first minute) or on one
// it has.
func TestBatchStatementsStayLinearInGenericPlans(t *testing.T) {
	for _, analyzed := range []bool{false, true} {
		t.Run(map[bool]string{false: "fresh table", true: "analyzed table"}[analyzed], func(t *testing.T) {
			url, _ := migrated(t)
			tr := &planTracer{t: t, explain: openPool(t, url, 1, nil), minRows: planBatch, analyze: analyzed}
			runBatchStatements(t, openPool(t, url, 2, tr))
			tr.mu.Lock()
			defer tr.mu.Unlock()
			// Every statement the worker, the reaper and a replay run per
			// batch must have been seen.
			for _, want := range []string{
				"INSERT INTO postline_messages AS m", "UPDATE postline_messages m SET\n\t\tstatus = u.status",
				"lease_expires_at = now() + make_interval", "conflicts = m.conflicts",
				"UPDATE postline_recipients p SET", "status = 'retrying'", "status = 'pending'",
			} {
				found := false
				for _, sql := range tr.explained {
					found = found || strings.Contains(sql, want)
				}
				if !found {
					t.Errorf("no batch statement containing %q was explained", want)
				}
			}
		})
	}
}

// runBatchStatements takes three sets of planBatch mails through the
// store's batch operations: one claimed, extended, noted, sent and
// delivered; one whose lease runs out and is handed back; one that fails and
// is reset for a replay.
func runBatchStatements(t *testing.T, pool *pgxpool.Pool) {
	ctx := t.Context()
	s, _ := newStore(t, pool, "w1", time.Minute)
	// claimAll claims a set, and claims it again when again is set: every
	// one busy, the path that reads the rows back.
	claimAll := func(s *idempotency.Store, set string, again bool) ([]string, []int64) {
		t.Helper()
		reqs := make([]idempotency.ClaimRequest, planBatch)
		ids := make([]string, planBatch)
		for i := range reqs {
			ids[i] = fmt.Sprintf("<plan-%s-%03d@postline.test>", set, i)
			reqs[i] = req(ids[i], "content "+ids[i], 1)
		}
		claims, err := s.Claim(ctx, reqs)
		if err != nil {
			t.Fatalf("Claim %s: %v", set, err)
		}
		versions := make([]int64, planBatch)
		for i, c := range claims {
			if c.Result != idempotency.Claimed {
				t.Fatalf("claim %s: %v, want claimed", c.MessageID, c.Result)
			}
			versions[i] = c.Version
		}
		if again {
			if _, err := s.Claim(ctx, reqs); err != nil {
				t.Fatalf("second Claim %s: %v", set, err)
			}
		}
		return ids, versions
	}
	fates := func(ids []string, versions []int64, status idempotency.Status, state idempotency.RecipientState) []idempotency.Fate {
		outs := make([]idempotency.Fate, len(ids))
		for i, id := range ids {
			outs[i] = idempotency.Fate{
				MessageID: id, Version: versions[i], Status: status, Provider: "relay",
				Stream: "transactional", ConfirmBy: time.Now().Add(time.Hour),
				Recipients: []idempotency.RecipientFate{{Index: 0, Address: fmt.Sprintf("r%d@example.test", i),
					State: state, Attempt: 1, Provider: "relay"}},
			}
		}
		return outs
	}

	ids, versions := claimAll(s, "sent", true)
	if lost, err := s.ExtendLease(ctx, ids, versions); err != nil || len(lost) > 0 {
		t.Fatalf("ExtendLease: lost %d, %v", len(lost), err)
	}
	if err := s.NoteConflicts(ctx, ids); err != nil {
		t.Fatalf("NoteConflicts: %v", err)
	}
	if lost, err := s.Record(ctx, fates(ids, versions, idempotency.StatusSent, idempotency.RecipientAccepted)); err != nil || len(lost) > 0 {
		t.Fatalf("Record: lost %d, %v", len(lost), err)
	}
	res := make([]idempotency.Resolution, planBatch)
	for i, id := range ids {
		res[i] = idempotency.Resolution{MessageID: id, Index: 0, From: idempotency.RecipientAccepted,
			To: idempotency.RecipientDelivered, Source: "dsn"}
	}
	if _, _, err := s.Resolve(ctx, res); err != nil {
		t.Fatalf("Resolve: %v", err)
	}

	short, _ := newStore(t, pool, "w2", time.Millisecond)
	ids, versions = claimAll(short, "handedback", false)
	time.Sleep(20 * time.Millisecond) // the leases run out
	if lost, err := s.HandBack(ctx, ids, versions); err != nil || len(lost) > 0 {
		t.Fatalf("HandBack: lost %d, %v", len(lost), err)
	}

	ids, versions = claimAll(s, "failed", false)
	if lost, err := s.Record(ctx, fates(ids, versions, idempotency.StatusFailed, idempotency.RecipientFailed)); err != nil || len(lost) > 0 {
		t.Fatalf("Record failed: lost %d, %v", len(lost), err)
	}
	resets := make([]idempotency.Reset, len(ids))
	for i, id := range ids {
		resets[i] = idempotency.Reset{MessageID: id, PayloadHash: hash("content " + id), Payload: []byte("{}")}
	}
	if reset, err := s.ResetForReplay(ctx, resets); err != nil || len(reset) != len(ids) {
		t.Fatalf("ResetForReplay: %d of %d reset, %v", len(reset), len(ids), err)
	}
}

// planTracer explains, on its own connection, every statement with a
// parameter array of at least minRows elements, just before the store runs
// it, and fails the test if a node of the generic plan visits more than
// maxVisitsPerRow rows per element. The statement runs inside a transaction
// that is rolled back, so the store then finds the rows as it left them.
type planTracer struct {
	t       *testing.T
	explain *pgxpool.Pool
	minRows int
	// analyze has the statistics refreshed before each explain, as
	// autovacuum keeps them; without it the tables are never analyzed.
	analyze bool

	mu        sync.Mutex
	explained []string
}

// maxVisitsPerRow bounds the rows a node of a linear plan visits per batch
// row: a scan, a lookup and the rows of its joins. A nested join of two
// batch-sized sets visits planBatch per row.
const maxVisitsPerRow = 8

func (p *planTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	p.check(ctx, data.SQL, data.Args)
	return ctx
}

func (p *planTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (p *planTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	// Each statement of the batch is explained on the rows as they are
	// before the batch: the plan is what is checked, and it does not
	// depend on what the statements before it in the batch change.
	for _, q := range data.Batch.QueuedQueries {
		p.check(ctx, q.SQL, q.Arguments)
	}
	return ctx
}

func (p *planTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (p *planTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (p *planTracer) check(ctx context.Context, sql string, args []any) {
	p.t.Helper()
	if batchLen(args) < p.minRows {
		return
	}
	plan, err := p.genericPlan(ctx, sql, args)
	if err != nil {
		p.t.Errorf("explain %s: %v", firstLine(sql), err)
		return
	}
	p.mu.Lock()
	p.explained = append(p.explained, sql)
	p.mu.Unlock()
	limit := float64(maxVisitsPerRow * p.minRows)
	walkPlan(plan, func(n planNode) {
		if v := n.visits(); v > limit {
			p.t.Errorf("%s: plan node %q (%s) visits %.0f rows for a batch of %d, more than %.0f:\n%s",
				firstLine(sql), n.NodeType, n.RelationName+n.CTEName, v, p.minRows, limit, sql)
		}
	})
}

// genericPlan runs sql with args under EXPLAIN ANALYZE in a transaction it
// rolls back, forced to the generic plan, and returns the plan's root.
func (p *planTracer) genericPlan(ctx context.Context, sql string, args []any) (planNode, error) {
	conn, err := p.explain.Acquire(ctx)
	if err != nil {
		return planNode{}, err
	}
	defer conn.Release()
	defer conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE ALL") //nolint:errcheck // best effort: the pool closes with the test
	if p.analyze {
		if _, err := conn.Exec(ctx, "ANALYZE postline_messages, postline_recipients"); err != nil {
			return planNode{}, err
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return planNode{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // rolled back on purpose
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		return planNode{}, err
	}
	if _, err := tx.Exec(ctx, "PREPARE planned AS "+sql); err != nil {
		return planNode{}, err
	}
	params := make([]string, len(args))
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	// EXECUTE takes no bind parameters: the simple protocol writes the
	// arguments into the statement as literals.
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE planned("+strings.Join(params, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&out); err != nil {
		return planNode{}, err
	}
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc) != 1 {
		return planNode{}, fmt.Errorf("explain output: %v (%d plans)", err, len(doc))
	}
	return doc[0].Plan, nil
}

// planNode is the part of a node of EXPLAIN (ANALYZE, FORMAT JSON) the test
// reads.
type planNode struct {
	NodeType          string     `json:"Node Type"`
	RelationName      string     `json:"Relation Name"`
	CTEName           string     `json:"CTE Name"`
	ActualRows        float64    `json:"Actual Rows"`
	ActualLoops       float64    `json:"Actual Loops"`
	RemovedByFilter   float64    `json:"Rows Removed by Filter"`
	RemovedByJoinFilt float64    `json:"Rows Removed by Join Filter"`
	Plans             []planNode `json:"Plans"`
}

// visits is the rows the node produced or looked at and dropped, over all
// its loops (EXPLAIN reports every count per loop).
func (n planNode) visits() float64 {
	return (n.ActualRows + n.RemovedByFilter + n.RemovedByJoinFilt) * n.ActualLoops
}

func walkPlan(n planNode, fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		walkPlan(c, fn)
	}
}

// batchLen is the length of the longest slice among args.
func batchLen(args []any) int {
	longest := 0
	for _, a := range args {
		n := 0
		switch v := a.(type) {
		case []string:
			n = len(v)
		case []int64:
			n = len(v)
		case []int32:
			n = len(v)
		case [][]byte:
			n = len(v)
		}
		longest = max(longest, n)
	}
	return longest
}

func firstLine(sql string) string {
	for l := range strings.SplitSeq(sql, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
