package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// Lifetimes the suite uses. They are only offsets from a base time: no test
// waits for them to pass.
const (
	lease     = 5 * time.Minute
	retention = 24 * time.Hour
)

// timeTolerance is how far a time read back from a store may be from the
// time the suite wrote.
const timeTolerance = time.Millisecond

// notifyTimeout is how long the Notifier tests wait for a watch to fire.
const notifyTimeout = 5 * time.Second

// scopeA is the scope most tests use; it is what the engine would build.
var scopeA = idem.Scope("tenant-1", "POST", "/orders/{id}")

// scopeOther is another tenant's scope, for tests that span two.
var scopeOther = idem.Scope("tenant-2", "POST", "/orders/{id}")

// RunStore checks that a Store keeps the contract written on [store.Store]
// and on the optional capabilities it implements (Getter, Deleter,
// ExpiredDeleter, Extender, BatchExtender, Evicter, Clock, Notifier,
// TxBeginner, TxClaimer; a capability's subtests are skipped when the store lacks it). It is the one definition of that
// contract: every store here runs it, and so should any other.
//
// newStore returns a fresh, empty store that no other subtest sees (a new
// instance, or a unique key prefix or table on a shared server) and
// registers its cleanup with t.Cleanup. RunStore calls it once per subtest
// and once per capability; subtests do not run in parallel. What the
// suite checks, and how it treats time, is in the package docs.
//
//	conformance.RunStore(t, func(t *testing.T) store.Store { return newTestStore(t) })
func RunStore(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, tc := range contractTests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(newHarness(t, newStore(t)))
		})
	}
	for _, group := range capabilityTests {
		t.Run(group.name, func(t *testing.T) {
			if probe := newStore(t); !group.implementedBy(probe) {
				t.Skipf("%T does not implement store.%s; its rules are not checked", probe, group.name)
			}
			for _, tc := range group.tests {
				t.Run(tc.name, func(t *testing.T) {
					tc.run(newHarness(t, newStore(t)))
				})
			}
		})
	}
}

type storeTest struct {
	name string
	run  func(h *harness)
}

var contractTests = []storeTest{
	{"ClaimOnEmpty", testClaimOnEmpty},
	{"ClaimLiveLeaseReturnsExisting", testClaimLiveLease},
	{"ClaimAbandonedLeaseTakesOver", testClaimAbandonedLease},
	{"ClaimCompletedReturnsResult", testClaimCompleted},
	{"ClaimExpiredCompletedTakesOver", testClaimExpiredCompleted},
	{"CompleteWrongToken", testCompleteWrongToken},
	{"CompleteMissingRecord", testCompleteMissing},
	{"CompleteAfterLeaseEnd", testCompleteAfterLeaseEnd},
	{"CompleteInGraceByWallClock", testCompleteInGrace},
	{"CompleteTwice", testCompleteTwice},
	{"CompleteAfterTakeover", testCompleteAfterTakeover},
	{"CompleteCopiesBody", testCompleteKeepsCopy},
	{"CompleteRefusesNoHead", testCompleteNoHead},
	{"ReleaseWrongToken", testReleaseWrongToken},
	{"ReleaseNeverDeletesCompleted", testReleaseCompleted},
	{"ReleaseThenClaimAgain", testReleaseThenClaim},
	{"ReleaseMissingRecord", testReleaseMissing},
	{"ResultRoundTrip", testResultRoundTrip},
	{"TimePrecision", testTimePrecision},
	{"ScopeAndKeyIsolation", testIsolation},
	{"ConcurrentClaimsOneKey", testConcurrentOneKey},
	{"ConcurrentTakeoverOfAbandonedClaim", testConcurrentTakeoverAbandoned},
	{"ConcurrentTakeoverOfExpiredRecord", testConcurrentTakeoverExpired},
	{"ConcurrentManyKeys", testConcurrentManyKeys},
	{"ExistingIsCopy", testExistingIsCopy},
}

type capabilityGroup struct {
	name          string
	implementedBy func(store.Store) bool
	tests         []storeTest
}

func implements[C any](s store.Store) bool {
	_, ok := s.(C)
	return ok
}

var capabilityTests = []capabilityGroup{
	{"Getter", implements[store.Getter], []storeTest{
		{"InProgress", testGetInProgress},
		{"Completed", testGetCompleted},
		{"Missing", testGetMissing},
		{"Expired", testGetExpired},
	}},
	{"Deleter", implements[store.Deleter], []storeTest{
		{"InProgress", testDeleteInProgress},
		{"Completed", testDeleteCompleted},
		{"Missing", testDeleteMissing},
	}},
	{"ExpiredDeleter", implements[store.ExpiredDeleter], []storeTest{
		{"Empty", testDeleteExpiredEmpty},
		{"RemovesOnlyExpired", testDeleteExpired},
	}},
	{"Extender", implements[store.Extender], []storeTest{
		{"ExtendsLiveClaim", testExtendLive},
		{"WrongToken", testExtendWrongToken},
		{"Completed", testExtendCompleted},
		{"AfterLeaseEnd", testExtendAfterLeaseEnd},
		{"MissingRecord", testExtendMissing},
		{"AfterTakeover", testExtendAfterTakeover},
	}},
	{"BatchExtender", implements[store.BatchExtender], []storeTest{
		{"EachRefOnItsOwn", testExtendBatch},
	}},
	{"Evicter", implements[store.Evicter], []storeTest{
		{"InProgress", testEvictInProgress},
		{"Completed", testEvictCompleted},
		{"WrongToken", testEvictWrongToken},
		{"AfterTakeover", testEvictAfterTakeover},
		{"MissingRecord", testEvictMissing},
	}},
	{"Clock", implements[store.Clock], []storeTest{
		{"NearLocalTime", testClockNearLocal},
		{"MovesForward", testClockForward},
	}},
	{"Notifier", implements[store.Notifier], []storeTest{
		{"Complete", testWatchComplete},
		{"Release", testWatchRelease},
		{"Delete", testWatchDelete},
		{"SeveralWatchers", testWatchSeveral},
		{"StopTwice", testWatchStopTwice},
	}},
	{"TxBeginner", implements[store.TxBeginner], []storeTest{
		{"CommitCompletes", testTxCommit},
		{"CommitAfterBeginContextEnds", testTxCommitAfterBeginCtx},
		{"CommitAfterTakeover", testTxCommitAfterTakeover},
		{"RollbackThenRelease", testTxRollback},
		{"ClaimHolderBlocksTakeover", testTxHoldsClaim},
	}},
	{"TxClaimer", implements[store.TxClaimer], []storeTest{
		{"ClaimHeldUntilCommit", testClaimTxHeld},
		{"RollbackFreesTheKey", testClaimTxRollback},
		{"CommitAfterClaimContextEnds", testClaimTxCtx},
		{"ExistingRecords", testClaimTxExisting},
	}},
}

// harness carries one subtest's store and clock.
type harness struct {
	t    *testing.T
	s    store.Store
	base time.Time
}

func newHarness(t *testing.T, s store.Store) *harness {
	if s == nil {
		t.Fatal("newStore returned a nil Store")
	}
	return &harness{t: t, s: s, base: time.Now().Truncate(time.Millisecond)}
}

// at returns the base time plus d.
func (h *harness) at(d time.Duration) time.Time { return h.base.Add(d) }

// when formats a time relative to the base, for failure messages.
func (h *harness) when(x time.Time) string {
	if x.IsZero() {
		return "the zero time"
	}
	d := x.Sub(h.base)
	if d < 0 {
		return "base-" + (-d).String()
	}
	return "base+" + d.String()
}

// newClaim returns a claim taken at now with the default lease.
func (h *harness) newClaim(scope, key, fingerprint, token string, now time.Time) store.Claim {
	return store.Claim{
		Scope:       scope,
		Key:         key,
		Fingerprint: fingerprint,
		Token:       token,
		Now:         now,
		LeaseEnd:    now.Add(lease),
	}
}

func (h *harness) describe(c store.Claim) string {
	return fmt.Sprintf("Claim(scope %q, key %q, fingerprint %q, token %q, now %s, lease end %s)",
		c.Scope, c.Key, c.Fingerprint, c.Token, h.when(c.Now), h.when(c.LeaseEnd))
}

// claim calls Claim and checks that Existing is set exactly when Acquired
// is false.
func (h *harness) claim(c store.Claim) store.ClaimResult {
	h.t.Helper()
	res, err := h.s.Claim(h.t.Context(), c)
	if err != nil {
		h.t.Fatalf("%s: unexpected error: %v", h.describe(c), err)
	}
	if res.Acquired && res.Existing != nil {
		h.t.Fatalf("%s: Acquired is true but Existing is %+v; Existing must be set exactly when Acquired is false", h.describe(c), *res.Existing)
	}
	if !res.Acquired && res.Existing == nil {
		h.t.Fatalf("%s: Acquired is false but Existing is nil; Existing must be set exactly when Acquired is false", h.describe(c))
	}
	return res
}

// acquire claims and fails the test unless the claim is acquired.
func (h *harness) acquire(c store.Claim, why string) {
	h.t.Helper()
	if res := h.claim(c); !res.Acquired {
		h.t.Fatalf("%s: not acquired, want acquired (%s); existing record: %s", h.describe(c), why, h.formatRecord(res.Existing))
	}
}

// blocked claims and fails the test unless the claim is refused; it
// returns the Existing record.
func (h *harness) blocked(c store.Claim, why string) *store.Record {
	h.t.Helper()
	res := h.claim(c)
	if res.Acquired {
		h.t.Fatalf("%s: acquired, want refused with the existing record (%s)", h.describe(c), why)
	}
	return res.Existing
}

func (h *harness) formatRecord(r *store.Record) string {
	if r == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{Fingerprint:%q State:%s CreatedAt:%s LeaseEnd:%s ExpiresAt:%s Result:%s}",
		r.Fingerprint, r.State, h.when(r.CreatedAt), h.when(r.LeaseEnd), h.when(r.ExpiresAt), formatResult(&r.Result))
}

// formatResult describes r for failure messages: the sizes, and the
// start of the Head.
func formatResult(r *store.Result) string {
	head := r.Head
	if len(head) > 32 {
		head = head[:32]
	}
	return fmt.Sprintf("{Head:%d bytes, starting %q Body:%d bytes (nil %t) BodyOmitted:%t}",
		len(r.Head), head, len(r.Body), r.Body == nil, r.BodyOmitted)
}

// hold names the claim of (scope, key) with token.
func hold(scope, key, token string) store.Hold {
	return store.Hold{Ref: store.Ref{Scope: scope, Key: key}, Token: token}
}

func (h *harness) complete(scope, key, token string, res store.Result, now, expiresAt time.Time) error {
	return h.s.Complete(h.t.Context(), hold(scope, key, token), store.Completion{Result: res, Now: now, ExpiresAt: expiresAt})
}

func (h *harness) mustComplete(scope, key, token string, res store.Result, now, expiresAt time.Time) {
	h.t.Helper()
	if err := h.complete(scope, key, token, res, now, expiresAt); err != nil {
		h.t.Fatalf("Complete(scope %q, key %q, token %q, now %s, expires %s): unexpected error: %v",
			scope, key, token, h.when(now), h.when(expiresAt), err)
	}
}

// wantLeaseLost fails the test unless err is ErrLeaseLost.
func (h *harness) wantLeaseLost(err error, call string) {
	h.t.Helper()
	if !errors.Is(err, store.ErrLeaseLost) {
		h.t.Fatalf("%s: got error %v, want one that errors.Is store.ErrLeaseLost", call, err)
	}
}

// want describes the record a store should hold.
type want struct {
	fingerprint string
	state       store.State
	createdAt   time.Time
	leaseEnd    time.Time // zero for completed records
	expiresAt   time.Time
	result      *store.Result // checked when state is Completed
}

// inProgress describes the record a fresh claim c leaves.
func inProgress(c store.Claim) want {
	return want{
		fingerprint: c.Fingerprint,
		state:       store.InProgress,
		createdAt:   c.Now,
		leaseEnd:    c.LeaseEnd,
		expiresAt:   c.LeaseEnd,
	}
}

// completed describes the record claim c leaves once completed with res.
func completed(c store.Claim, res store.Result, expiresAt time.Time) want {
	return want{
		fingerprint: c.Fingerprint,
		state:       store.Completed,
		createdAt:   c.Now,
		expiresAt:   expiresAt,
		result:      &res,
	}
}

func (h *harness) checkRecord(what string, got *store.Record, w want) {
	h.t.Helper()
	if got == nil {
		h.t.Fatalf("%s: record is nil", what)
	}
	var diffs []string
	if got.Fingerprint != w.fingerprint {
		diffs = append(diffs, fmt.Sprintf("Fingerprint is %q, want %q", got.Fingerprint, w.fingerprint))
	}
	if got.State != w.state {
		diffs = append(diffs, fmt.Sprintf("State is %s (%d), want %s", got.State, got.State, w.state))
	}
	diffs = h.diffTime(diffs, "CreatedAt", got.CreatedAt, w.createdAt)
	diffs = h.diffTime(diffs, "LeaseEnd", got.LeaseEnd, w.leaseEnd)
	diffs = h.diffTime(diffs, "ExpiresAt", got.ExpiresAt, w.expiresAt)
	if w.state == store.Completed {
		diffs = append(diffs, diffResult(&got.Result, w.result)...)
	}
	if len(diffs) > 0 {
		h.t.Errorf("%s: record differs from what was stored:\n\t%s\ngot %s",
			what, strings.Join(diffs, "\n\t"), h.formatRecord(got))
	}
}

func (h *harness) diffTime(diffs []string, field string, got, want time.Time) []string {
	if !sameTime(got, want) {
		diffs = append(diffs, fmt.Sprintf("%s is %s, want %s (tolerance %s)", field, h.when(got), h.when(want), timeTolerance))
	}
	return diffs
}

// sameTime reports whether a and b are both zero, or both non-zero and
// within timeTolerance of each other.
func sameTime(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() == b.IsZero()
	}
	d := a.Sub(b)
	return -timeTolerance <= d && d <= timeTolerance
}

// diffResult lists how got differs from want: Head and Body byte for
// byte (a nil and an empty Body are equal), and BodyOmitted.
func diffResult(got, want *store.Result) []string {
	var diffs []string
	if got.BodyOmitted != want.BodyOmitted {
		diffs = append(diffs, fmt.Sprintf("Result.BodyOmitted is %t, want %t", got.BodyOmitted, want.BodyOmitted))
	}
	if len(got.Head) == 0 {
		diffs = append(diffs, "Result.Head is empty; a completed record always keeps its Head")
	}
	if d := diffBytes("Result.Head", got.Head, want.Head); d != "" {
		diffs = append(diffs, d)
	}
	if d := diffBytes("Result.Body", got.Body, want.Body); d != "" {
		diffs = append(diffs, d)
	}
	return diffs
}

// diffBytes describes how got differs from want, or returns "".
func diffBytes(field string, got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	msg := fmt.Sprintf("%s is %d bytes, want %d; first difference at byte %d", field, len(got), len(want), i)
	if i < len(got) && i < len(want) {
		msg += fmt.Sprintf(" (got 0x%02x, want 0x%02x)", got[i], want[i])
	}
	return msg
}

// okResult is a small result the tests complete claims with. Its Head is
// opaque bytes, as the engine's are to a store: not UTF-8, with a 0 byte,
// and different for each body.
func okResult(body string) store.Result {
	return store.Result{
		Head: append([]byte{0x01, 0xc9, 0x01, 0x00, 0xff, 0xfe, ' '}, body...),
		Body: []byte(body),
	}
}

// snapshot returns a deep copy of r, taken before r is handed to a store.
func snapshot(r store.Result) store.Result {
	r.Head = bytes.Clone(r.Head)
	r.Body = bytes.Clone(r.Body)
	return r
}

// Claim

func testClaimOnEmpty(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(time.Second)),
		"the first claim holds a live lease")
	h.checkRecord("Existing after the first claim", rec, inProgress(c))
}

func testClaimLiveLease(h *harness) {
	first := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(first, "there is no record")
	for _, d := range []time.Duration{0, time.Second, lease / 2, lease - time.Second} {
		// Same fingerprint or not, a live claim blocks; the record stays the
		// first claim's.
		for _, fp := range []string{"fp-1", "fp-other"} {
			c := h.newClaim(scopeA, "key-1", fp, "token-"+fp, h.at(d))
			rec := h.blocked(c, "the first claim's lease has not ended")
			h.checkRecord(fmt.Sprintf("Existing for a claim at %s with fingerprint %q", h.when(c.Now), fp), rec, inProgress(first))
		}
	}
}

func testClaimAbandonedLease(h *harness) {
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{
		{"AtLeaseEnd", lease},
		{"AfterLeaseEnd", lease + time.Hour},
	} {
		h.t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, h.s)
			key := "key-" + tc.name
			first := h.newClaim(scopeA, key, "fp-1", "token-1", h.at(0))
			h.acquire(first, "there is no record")
			second := h.newClaim(scopeA, key, "fp-2", "token-2", h.at(tc.after))
			h.acquire(second, "the first claim was never completed and its lease has ended (now >= LeaseEnd)")
			rec := h.blocked(h.newClaim(scopeA, key, "fp-3", "token-3", second.Now.Add(time.Second)),
				"the second claim holds a live lease")
			h.checkRecord("Existing after the takeover", rec, inProgress(second))
		})
	}
}

func testClaimCompleted(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	resp := okResult("completed")
	expires := h.at(retention)
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(time.Second), expires)
	for _, d := range []time.Duration{2 * time.Second, lease, lease + time.Minute, retention - time.Second} {
		retry := h.newClaim(scopeA, "key-1", "fp-1", "token-retry", h.at(d))
		rec := h.blocked(retry, "the record is completed and has not expired; the lease no longer matters")
		h.checkRecord("Existing for a retry at "+h.when(retry.Now), rec, completed(c, resp, expires))
	}
}

func testClaimExpiredCompleted(h *harness) {
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{
		{"AtExpiresAt", retention},
		{"AfterExpiresAt", retention + time.Hour},
	} {
		h.t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, h.s)
			key := "key-" + tc.name
			h.acquire(h.newClaim(scopeA, key, "fp-1", "token-1", h.at(0)), "there is no record")
			h.mustComplete(scopeA, key, "token-1", okResult("old"), h.at(time.Second), h.at(retention))
			next := h.newClaim(scopeA, key, "fp-2", "token-2", h.at(tc.after))
			h.acquire(next, "the completed record has expired (now >= ExpiresAt)")
			rec := h.blocked(h.newClaim(scopeA, key, "fp-3", "token-3", next.Now.Add(time.Second)),
				"the new claim holds a live lease")
			h.checkRecord("Existing after claiming an expired key", rec, inProgress(next))
		})
	}
}

// Complete

// testCompleteNoHead: a result without a head would read back as a
// corrupt record; Complete refuses it with an error of its own, and the
// claim is still held.
func testCompleteNoHead(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	for _, head := range [][]byte{nil, {}} {
		err := h.complete(scopeA, "key-1", "token-1", store.Result{Head: head, Body: []byte("x")}, h.at(time.Second), h.at(retention))
		if err == nil || errors.Is(err, store.ErrLeaseLost) {
			h.t.Errorf("Complete of a result with head %v: %v, want an error that is not ErrLeaseLost", head, err)
		}
		rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-x", "token-x", h.at(2*time.Second)), "the claim is still held")
		h.checkRecord("record after Complete without a head", rec, inProgress(c))
	}
}

func testCompleteWrongToken(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	for _, token := range []string{"token-2", "", "token-1 ", "TOKEN-1", "token-"} {
		err := h.complete(scopeA, "key-1", token, okResult("wrong"), h.at(time.Second), h.at(retention))
		h.wantLeaseLost(err, fmt.Sprintf("Complete with token %q while %q holds the claim", token, "token-1"))
		rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-x", "token-x", h.at(2*time.Second)), "the claim is still held")
		h.checkRecord(fmt.Sprintf("record after Complete with wrong token %q", token), rec, inProgress(c))
	}
	resp := okResult("right")
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(3*time.Second), h.at(retention))
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-x", h.at(4*time.Second)), "the record is completed")
	h.checkRecord("record after Complete with the right token", rec, completed(c, resp, h.at(retention)))
}

func testCompleteMissing(h *harness) {
	err := h.complete(scopeA, "never-claimed", "token-1", okResult("x"), h.at(0), h.at(retention))
	h.wantLeaseLost(err, "Complete on a key that was never claimed")
	h.acquire(h.newClaim(scopeA, "never-claimed", "fp-1", "token-1", h.at(time.Second)),
		"a failed Complete must not create a record")
}

// testCompleteInGrace: a claim whose lease ended in the past by the wall
// clock (not only by the suite's offsets), and that nobody took over,
// still lands its late Complete: a store that removes records by itself
// keeps an in-progress record until LeaseEnd + (LeaseEnd - CreatedAt).
// The times are real ones, so a store that expires records by its own
// clock or by absolute times (a TTL attribute, a sweeper) is held to the
// grace, not only to the lease.
func testCompleteInGrace(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(-lease-2*time.Minute))
	h.acquire(c, "there is no record")
	now := h.at(0) // two minutes past the lease end, three before the grace ends
	resp := okResult("late")
	if err := h.complete(scopeA, "key-1", "token-1", resp, now, now.Add(retention)); err != nil {
		h.t.Fatalf("Complete at %s of a claim whose lease ended at %s (its grace lasts a lease more) and that nobody took over: %v, want it to land",
			h.when(now), h.when(c.LeaseEnd), err)
	}
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-2", now.Add(time.Second)), "the late Complete stored the record")
	h.checkRecord("record after a Complete in the grace", rec, completed(c, resp, now.Add(retention)))
}

// testCompleteAfterLeaseEnd: a lease that ended without anyone taking the
// key over still belongs to its token, so a late Complete lands.
func testCompleteAfterLeaseEnd(h *harness) {
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{
		{"AtLeaseEnd", lease},
		{"AfterLeaseEnd", lease + time.Minute},
	} {
		h.t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, h.s)
			key := "key-" + tc.name
			c := h.newClaim(scopeA, key, "fp-1", "token-1", h.at(0))
			h.acquire(c, "there is no record")
			now := h.at(tc.after)
			resp := okResult("late")
			if err := h.complete(scopeA, key, "token-1", resp, now, now.Add(retention)); err != nil {
				t.Fatalf("Complete at %s of a claim whose lease ended at %s and that nobody took over: %v, want it to land",
					h.when(now), h.when(c.LeaseEnd), err)
			}
			rec := h.blocked(h.newClaim(scopeA, key, "fp-1", "token-2", now.Add(time.Second)), "the late Complete stored the record")
			h.checkRecord("record after a late Complete", rec, completed(c, resp, now.Add(retention)))
		})
	}
}

func testCompleteTwice(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	first := okResult("first")
	h.mustComplete(scopeA, "key-1", "token-1", first, h.at(time.Second), h.at(retention))
	err := h.complete(scopeA, "key-1", "token-1", okResult("second"), h.at(2*time.Second), h.at(2*retention))
	h.wantLeaseLost(err, "a second Complete with the same token on a completed record")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-2", h.at(3*time.Second)), "the record is completed")
	h.checkRecord("record after a second Complete", rec, completed(c, first, h.at(retention)))
}

func testCompleteAfterTakeover(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-old", "token-old", h.at(0)), "there is no record")
	taker := h.newClaim(scopeA, "key-1", "fp-new", "token-new", h.at(lease+time.Second))
	h.acquire(taker, "the old claim's lease has ended")

	// The old request's clock may lag; even with a now inside its own old
	// lease, its token no longer holds the record.
	err := h.complete(scopeA, "key-1", "token-old", okResult("old"), h.at(time.Minute), h.at(retention))
	h.wantLeaseLost(err, "Complete with the token of a claim that was taken over")
	err = h.complete(scopeA, "key-1", "token-old", okResult("old"), taker.Now.Add(time.Second), h.at(retention))
	h.wantLeaseLost(err, "Complete with the token of a claim that was taken over")
	// Nor once the taker's own lease has ended (it stalled, and nobody
	// took the key over from it): a token check is not a lease check.
	err = h.complete(scopeA, "key-1", "token-old", okResult("old"), taker.LeaseEnd.Add(time.Second), h.at(retention))
	h.wantLeaseLost(err, "Complete with the token of a claim that was taken over, after the taker's lease ended")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-x", "token-x", taker.Now.Add(2*time.Second)), "the new claim holds the key")
	h.checkRecord("new owner's record after the old owner's Complete", rec, inProgress(taker))

	h.wantLeaseLost(h.s.Release(h.t.Context(), hold(scopeA, "key-1", "token-old")),
		"Release with the token of a claim that was taken over")
	rec = h.blocked(h.newClaim(scopeA, "key-1", "fp-x", "token-x", taker.Now.Add(3*time.Second)), "the new claim holds the key")
	h.checkRecord("new owner's record after the old owner's Release", rec, inProgress(taker))

	resp := okResult("new")
	h.mustComplete(scopeA, "key-1", "token-new", resp, taker.Now.Add(4*time.Second), h.at(retention))
	rec = h.blocked(h.newClaim(scopeA, "key-1", "fp-new", "token-x", taker.Now.Add(5*time.Second)), "the record is completed")
	h.checkRecord("record completed by the new owner", rec, completed(taker, resp, h.at(retention)))
}

func testCompleteKeepsCopy(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	// Head and Body in one buffer, as an engine that encodes both into
	// pooled memory would hand them over.
	buf := []byte("\x01head\x00originalbody")
	res := store.Result{Head: buf[:6:6], Body: buf[6:]}
	stored := snapshot(res)
	h.mustComplete(scopeA, "key-1", "token-1", res, h.at(time.Second), h.at(retention))
	// The caller reuses the result's memory once Complete returns.
	copy(buf, "CHANGED!CHANGED!CHANGED!")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-2", h.at(2*time.Second)), "the record is completed")
	h.checkRecord("record after the caller reused the memory of the result it passed to Complete", rec, completed(c, stored, h.at(retention)))
	got, ok := h.getIfGetter(scopeA, "key-1", h.at(2*time.Second))
	if ok {
		h.checkRecord("Get after the caller reused the memory of the result it passed to Complete", got, completed(c, stored, h.at(retention)))
	}
}

// Release

func testReleaseWrongToken(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	for _, token := range []string{"token-2", "", "TOKEN-1"} {
		h.wantLeaseLost(h.s.Release(h.t.Context(), hold(scopeA, "key-1", token)),
			fmt.Sprintf("Release with token %q while %q holds the claim", token, "token-1"))
		rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-x", "token-x", h.at(time.Second)), "the claim is still held")
		h.checkRecord(fmt.Sprintf("record after Release with wrong token %q", token), rec, inProgress(c))
	}
	if err := h.s.Release(h.t.Context(), hold(scopeA, "key-1", "token-1")); err != nil {
		h.t.Fatalf("Release with the right token: unexpected error: %v", err)
	}
	h.acquire(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(2*time.Second)), "the claim was released")
}

func testReleaseCompleted(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	resp := okResult("kept")
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(time.Second), h.at(retention))
	for _, token := range []string{"token-1", "token-2"} {
		h.wantLeaseLost(h.s.Release(h.t.Context(), hold(scopeA, "key-1", token)),
			fmt.Sprintf("Release with token %q on a completed record", token))
		rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-x", h.at(2*time.Second)),
			"Release must never delete a completed record")
		h.checkRecord(fmt.Sprintf("record after Release with token %q", token), rec, completed(c, resp, h.at(retention)))
	}
}

func testReleaseThenClaim(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	if err := h.s.Release(h.t.Context(), hold(scopeA, "key-1", "token-1")); err != nil {
		h.t.Fatalf("Release with the right token: unexpected error: %v", err)
	}
	err := h.complete(scopeA, "key-1", "token-1", okResult("x"), h.at(time.Second), h.at(retention))
	h.wantLeaseLost(err, "Complete after the claim was released")

	next := h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(2*time.Second))
	h.acquire(next, "the previous claim was released, inside what was its lease")
	err = h.complete(scopeA, "key-1", "token-1", okResult("x"), h.at(3*time.Second), h.at(retention))
	h.wantLeaseLost(err, "Complete with the released claim's token after another request claimed the key")
	h.wantLeaseLost(h.s.Release(h.t.Context(), hold(scopeA, "key-1", "token-1")),
		"Release with the released claim's token after another request claimed the key")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-3", "token-3", h.at(4*time.Second)), "the new claim holds the key")
	h.checkRecord("new claim's record", rec, inProgress(next))
}

func testReleaseMissing(h *harness) {
	// Releasing a record that is not there is ErrLeaseLost, and creates
	// nothing.
	err := h.s.Release(h.t.Context(), hold(scopeA, "never-claimed", "token-1"))
	if !errors.Is(err, store.ErrLeaseLost) {
		h.t.Fatalf("Release on a key that was never claimed: got error %v, want store.ErrLeaseLost", err)
	}
	h.acquire(h.newClaim(scopeA, "never-claimed", "fp-1", "token-1", h.at(0)), "Release must not create a record")
}

// Round trip

// testResultRoundTrip: a store keeps a Result as opaque bytes and gives
// them back byte for byte, whatever they hold; Completion.Failed changes
// nothing in what is stored.
func testResultRoundTrip(h *harness) {
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	rng := rand.NewChaCha8([32]byte{'i', 'd', 'e', 'm'})
	big := make([]byte, 1<<20)
	rng.Read(big)
	maxHead := make([]byte, store.MaxHead)
	rng.Read(maxHead)
	maxHead[0] = 0x01

	tests := []struct {
		name   string
		res    store.Result
		failed bool
	}{
		{"OneByteHead", store.Result{Head: []byte{0x01}}, false},
		{"SmallHeadAndBody", okResult(`{"id":42}`), false},
		{"HeadOfEveryByteValue", store.Result{Head: allBytes, Body: []byte("x")}, false},
		{"HeadWithZeroBytes", store.Result{Head: []byte{0x01, 0x00, 0x00, 'k', 0x00, 'v', 0x00}, Body: []byte("z")}, false},
		{"HeadNotUTF8", store.Result{Head: []byte{0x01, 0xff, 0xfe, 0xc3, 0x28, 0x80, 0xed, 0xa0, 0x80}, Body: []byte("u")}, false},
		{"HeadLikeText", store.Result{Head: []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n%s 'quote\" \\ {x}"), Body: []byte("t")}, false},
		{"HeadOfMaxHeadBytes", store.Result{Head: maxHead, Body: []byte(`{"id":42}`)}, false},
		{"MaxHeadAndOneMiBBody", store.Result{Head: maxHead, Body: big}, false},
		{"NilBody", store.Result{Head: []byte{0x01, 0xcc, 0x01}}, false},
		{"EmptyBody", store.Result{Head: []byte{0x01, 0xca, 0x01}, Body: []byte{}}, false},
		{"BinaryBody", store.Result{
			Head: []byte{0x01, 0xc8, 0x01},
			Body: append(append([]byte{0x00, 0xff, 0xfe, 0xc3, 0x28, 0x00}, allBytes...), 0x00),
		}, false},
		{"OneMiBBody", store.Result{Head: []byte{0x02, 'b', 'i', 'g'}, Body: big}, false},
		{"BodyOmitted", store.Result{Head: []byte{0x01, 0xc8, 0x01, 0x00, 0xff, 's', 'i', 'z', 'e'}, BodyOmitted: true}, false},
		{"BodyOmittedWithMaxHead", store.Result{Head: maxHead, BodyOmitted: true}, false},
		// Failed is for Tx.Commit alone: Complete stores the result as
		// any other, and the record has nothing that tells them apart.
		{"FailedIsNotStored", store.Result{Head: []byte{0x01, 0x94, 0x03, 0x00}, Body: []byte(`{"title":"Not Found"}`)}, true},
	}
	for i, tc := range tests {
		h.t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, h.s)
			key := fmt.Sprintf("round-trip-%d", i)
			c := h.newClaim(scopeA, key, "fp-"+key, "token-"+key, h.at(0))
			h.acquire(c, "there is no record")
			// A store must not change what it is given either.
			want := snapshot(tc.res)
			done := store.Completion{Result: tc.res, Failed: tc.failed, Now: h.at(time.Second), ExpiresAt: h.at(retention)}
			if err := h.s.Complete(h.t.Context(), c.Hold(), done); err != nil {
				t.Fatalf("Complete(%s, Failed %t): unexpected error: %v", formatResult(&want), tc.failed, err)
			}
			if d := diffResult(&tc.res, &want); len(d) > 0 {
				t.Errorf("Complete changed the result it was given:\n\t%s", strings.Join(d, "\n\t"))
			}
			rec := h.blocked(h.newClaim(scopeA, key, c.Fingerprint, "token-retry", h.at(2*time.Second)), "the record is completed")
			h.checkRecord("replayed record", rec, completed(c, want, h.at(retention)))
			if got, ok := h.getIfGetter(scopeA, key, h.at(2*time.Second)); ok {
				h.checkRecord("record from Get", got, completed(c, want, h.at(retention)))
			}
		})
	}
}

func testTimePrecision(h *harness) {
	// Offsets with millisecond parts catch stores that keep whole seconds.
	c := store.Claim{
		Scope:       scopeA,
		Key:         "key-1",
		Fingerprint: "fp-1",
		Token:       "token-1",
		Now:         h.at(1001 * time.Millisecond),
		LeaseEnd:    h.at(lease + 7*time.Millisecond),
	}
	h.acquire(c, "there is no record")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(2*time.Second)), "the claim holds a live lease")
	h.checkRecord("in-progress record with millisecond times", rec, inProgress(c))

	resp := okResult("ms")
	expires := h.at(retention + 999*time.Millisecond)
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(3*time.Second), expires)
	rec = h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-2", h.at(retention+998*time.Millisecond)),
		"the record expires 1 ms later")
	h.checkRecord("completed record with millisecond times", rec, completed(c, resp, expires))
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-3", expires), "the record expired at exactly this now")
}

// Isolation

func testIsolation(h *harness) {
	// Pairs that collide under a naive join of scope and key (with or without
	// a ':' separator), that differ only in case or trailing bytes, and that
	// hold characters with a meaning in Redis keys or SQL.
	long := strings.Repeat("k", 255)
	pairs := []struct{ scope, key string }{
		{scopeA, "key"},
		{scopeA, "Key"},
		{scopeA, "key "},
		{scopeA, "keykey"},
		{scopeA, long},
		{scopeA, long[:254]},
		{idem.Scope("tenant-2", "POST", "/orders/{id}"), "key"},
		{idem.Scope("tenant-1", "PATCH", "/orders/{id}"), "key"},
		{idem.Scope("", "POST", "/orders/{id}"), "key"},
		{"a:b", "c"},
		{"a", "b:c"},
		{"a:", "b:c"},
		{"a", ":b:c"},
		{"{tag}", "k"},
		{"{tag", "}k"},
		{"{tag}k", "x"},
		{"scope with spaces", "key with spaces"},
		{"scope with", "spaces key with spaces"},
		{"scope with spaces key", "with spaces"},
		{idem.Scope("tenant-ü", "POST", "/crème/{id}"), "key"},
		{idem.Scope("テナント", "POST", "/注文/{id}"), "key"},
		{"emoji 🙂 scope", "key"},
		{"quote ' \" ; -- % _ \\ scope", "key%_*?[]"},
		{strings.Repeat("long-scope/", 100), "key"},
		{"nul\x00scope", "key"},
		{"nul", "key"},
		{"bytes \xff\xfe\x80 not UTF-8", "key"},
	}
	claims := make([]store.Claim, len(pairs))
	for i, p := range pairs {
		claims[i] = h.newClaim(p.scope, p.key, fmt.Sprintf("fp-%d", i), fmt.Sprintf("token-%d", i), h.at(0))
		h.acquire(claims[i], "no other claim used this (scope, key); it must not collide with an earlier pair")
	}
	// Release every third claim, complete the rest; each pair must see only
	// its own outcome.
	for i, c := range claims {
		if i%3 == 2 {
			if err := h.s.Release(h.t.Context(), hold(c.Scope, c.Key, c.Token)); err != nil {
				h.t.Fatalf("Release(scope %q, key %q) with its own token: unexpected error: %v", c.Scope, c.Key, err)
			}
			continue
		}
		h.mustComplete(c.Scope, c.Key, c.Token, okResult(fmt.Sprintf("response-%d", i)), h.at(time.Second), h.at(retention))
	}
	for i, c := range claims {
		retry := h.newClaim(c.Scope, c.Key, c.Fingerprint, "token-retry", h.at(2*time.Second))
		if i%3 == 2 {
			h.acquire(retry, "this pair was released; other pairs' records must not block it")
			continue
		}
		rec := h.blocked(retry, "this pair was completed")
		h.checkRecord(fmt.Sprintf("record of scope %q key %q", c.Scope, c.Key), rec,
			completed(c, okResult(fmt.Sprintf("response-%d", i)), h.at(retention)))
	}
}

// Concurrency

// testConcurrentTakeoverAbandoned races 64 claims for a key whose claim
// was abandoned (its lease passed): a store that reads and then writes
// without atomicity lets several take it over.
func testConcurrentTakeoverAbandoned(h *harness) {
	h.acquire(h.newClaim(scopeA, "abandoned", "fp-dead", "token-dead", h.at(0)), "planting the abandoned claim")
	raceTakeover(h, "abandoned", h.at(time.Hour))
}

// testConcurrentTakeoverExpired races 64 claims for a key whose completed
// record has expired.
func testConcurrentTakeoverExpired(h *harness) {
	h.acquire(h.newClaim(scopeA, "expired", "fp-old", "token-old", h.at(0)), "planting the record")
	h.mustComplete(scopeA, "expired", "token-old", okResult("old"), h.at(time.Second), h.at(time.Minute))
	raceTakeover(h, "expired", h.at(time.Hour))
}

func raceTakeover(h *harness, key string, now time.Time) {
	const n = 64
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		results = make([]store.ClaimResult, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			c := h.newClaim(scopeA, key, "fp-new", fmt.Sprintf("token-new-%d", i), now)
			results[i], errs[i] = h.s.Claim(h.t.Context(), c)
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range n {
		if errs[i] != nil {
			h.t.Fatalf("goroutine %d: Claim: unexpected error: %v", i, errs[i])
		}
		if results[i].Acquired {
			winners++
		} else if ex := results[i].Existing; ex == nil || ex.State != store.InProgress || ex.Fingerprint != "fp-new" {
			h.t.Fatalf("goroutine %d lost the race but got %s, want the winner's in-progress claim", i, h.formatRecord(ex))
		}
	}
	if winners != 1 {
		h.t.Fatalf("%d of %d goroutines took over the %s record; exactly one must", winners, n, key)
	}
}

func testConcurrentOneKey(h *harness) {
	const n = 64
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		results = make([]store.ClaimResult, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			c := h.newClaim(scopeA, "contended", fmt.Sprintf("fp-%d", i), fmt.Sprintf("token-%d", i), h.at(time.Duration(i)*time.Millisecond))
			results[i], errs[i] = h.s.Claim(h.t.Context(), c)
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i := range n {
		if errs[i] != nil {
			h.t.Fatalf("goroutine %d: Claim: unexpected error: %v", i, errs[i])
		}
		if results[i].Acquired {
			if winner >= 0 {
				h.t.Fatalf("goroutines %d and %d both acquired the same key; at most one caller may hold a claim", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		h.t.Fatalf("none of %d goroutines racing for an empty key acquired it; exactly one must", n)
	}
	wantFP := fmt.Sprintf("fp-%d", winner)
	for i := range n {
		if i == winner {
			continue
		}
		ex := results[i].Existing
		if ex == nil {
			h.t.Fatalf("goroutine %d: not acquired and Existing is nil", i)
		}
		if ex.Fingerprint != wantFP || ex.State != store.InProgress {
			h.t.Errorf("goroutine %d: Existing is %s, want the winner's in-progress record with fingerprint %q",
				i, h.formatRecord(ex), wantFP)
		}
	}
	h.mustComplete(scopeA, "contended", fmt.Sprintf("token-%d", winner), okResult("won"), h.at(time.Second), h.at(retention))
}

func testConcurrentManyKeys(h *harness) {
	const (
		keys    = 200
		workers = 8
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < keys; i += workers {
				key := fmt.Sprintf("key-%03d", i)
				c := h.newClaim(scopeA, key, "fp-"+key, "token-"+key, h.at(0))
				res, err := h.s.Claim(h.t.Context(), c)
				if err != nil {
					h.t.Errorf("Claim(key %q): unexpected error: %v", key, err)
					return
				}
				if !res.Acquired {
					h.t.Errorf("Claim(key %q): not acquired, want acquired: no other claim used this key; existing %s", key, h.formatRecord(res.Existing))
					return
				}
				if err := h.complete(scopeA, key, c.Token, okResult(key), h.at(time.Second), h.at(retention)); err != nil {
					h.t.Errorf("Complete(key %q): unexpected error: %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if h.t.Failed() {
		return
	}
	for i := range keys {
		key := fmt.Sprintf("key-%03d", i)
		c := h.newClaim(scopeA, key, "fp-"+key, "token-"+key, h.at(0))
		rec := h.blocked(h.newClaim(scopeA, key, "fp-"+key, "token-retry", h.at(2*time.Second)), "the key was completed")
		h.checkRecord("record of "+key, rec, completed(c, okResult(key), h.at(retention)))
	}
}

func testExistingIsCopy(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	probe := h.newClaim(scopeA, "key-1", "fp-x", "token-x", h.at(time.Second))
	scribble(h.blocked(probe, "the claim holds a live lease"))
	h.checkRecord("in-progress record after the caller changed a returned Existing", h.blocked(probe, "the claim holds a live lease"), inProgress(c))

	resp := okResult("kept")
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(2*time.Second), h.at(retention))
	probe.Now = h.at(3 * time.Second)
	scribble(h.blocked(probe, "the record is completed"))
	h.checkRecord("completed record after the caller changed a returned Existing", h.blocked(probe, "the record is completed"), completed(c, resp, h.at(retention)))
}

// scribble changes every field of r, but not the bytes r.Result's slices
// hold (a store may share them).
func scribble(r *store.Record) {
	r.Fingerprint = "scribbled"
	r.State = 0
	r.Result = store.Result{Head: []byte("scribbled"), Body: []byte("scribbled"), BodyOmitted: !r.Result.BodyOmitted}
	r.CreatedAt = time.Time{}
	r.LeaseEnd = time.Unix(1, 0)
	r.ExpiresAt = time.Unix(2, 0)
}

// Getter

func (h *harness) get(scope, key string, now time.Time) (store.Record, bool) {
	h.t.Helper()
	rec, ok, err := h.s.(store.Getter).Get(h.t.Context(), store.Ref{Scope: scope, Key: key}, now)
	if err != nil {
		h.t.Fatalf("Get(scope %q, key %q, now %s): unexpected error: %v", scope, key, h.when(now), err)
	}
	return rec, ok
}

// getIfGetter calls Get when the store is a Getter, and reports whether
// it did and found the record; it fails the test when Get finds nothing.
func (h *harness) getIfGetter(scope, key string, now time.Time) (*store.Record, bool) {
	h.t.Helper()
	if !implements[store.Getter](h.s) {
		return nil, false
	}
	rec, ok := h.get(scope, key, now)
	if !ok {
		h.t.Fatalf("Get(scope %q, key %q, now %s): not found, want the record a claim at that now returned", scope, key, h.when(now))
	}
	return &rec, true
}

func testGetInProgress(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	for _, d := range []time.Duration{0, time.Second, lease - time.Second} {
		rec, ok := h.get(scopeA, "key-1", h.at(d))
		if !ok {
			h.t.Fatalf("Get at %s: not found, want the in-progress record (lease ends at %s)", h.when(h.at(d)), h.when(c.LeaseEnd))
		}
		h.checkRecord("Get of an in-progress record", &rec, inProgress(c))
	}
	// Get changes nothing: the claim still blocks others.
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(time.Second)), "Get must not change the record")
	h.checkRecord("record after Get", rec, inProgress(c))
}

func testGetCompleted(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	resp := okResult("done")
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(time.Second), h.at(retention))
	for _, d := range []time.Duration{2 * time.Second, lease + time.Minute, retention - time.Second} {
		rec, ok := h.get(scopeA, "key-1", h.at(d))
		if !ok {
			h.t.Fatalf("Get at %s: not found, want the completed record (expires at %s)", h.when(h.at(d)), h.when(h.at(retention)))
		}
		h.checkRecord("Get of a completed record", &rec, completed(c, resp, h.at(retention)))
	}
}

func testGetMissing(h *harness) {
	if rec, ok := h.get(scopeA, "never-claimed", h.at(0)); ok {
		h.t.Fatalf("Get of a key that was never claimed: found %s, want not found", h.formatRecord(&rec))
	}
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	if rec, ok := h.get(idem.Scope("tenant-2", "POST", "/orders/{id}"), "key-1", h.at(0)); ok {
		h.t.Fatalf("Get of a claimed key in another scope: found %s, want not found", h.formatRecord(&rec))
	}
}

func testGetExpired(h *harness) {
	h.acquire(h.newClaim(scopeA, "done", "fp-1", "token-1", h.at(0)), "there is no record")
	h.mustComplete(scopeA, "done", "token-1", okResult("done"), h.at(time.Second), h.at(retention))
	h.acquire(h.newClaim(scopeA, "abandoned", "fp-2", "token-2", h.at(0)), "there is no record")
	for _, tc := range []struct {
		key string
		now time.Time
	}{
		{"done", h.at(retention)},
		{"done", h.at(retention + time.Hour)},
		{"abandoned", h.at(lease)},
		{"abandoned", h.at(lease + time.Hour)},
	} {
		if rec, ok := h.get(scopeA, tc.key, tc.now); ok {
			h.t.Errorf("Get(key %q) at %s: found %s, want not found: the record has expired (now >= ExpiresAt)",
				tc.key, h.when(tc.now), h.formatRecord(&rec))
		}
	}
}

// Deleter

func (h *harness) delete(scope, key string) bool {
	h.t.Helper()
	found, err := h.s.(store.Deleter).Delete(h.t.Context(), store.Ref{Scope: scope, Key: key})
	if err != nil {
		h.t.Fatalf("Delete(scope %q, key %q): unexpected error: %v", scope, key, err)
	}
	return found
}

func testDeleteInProgress(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	if !h.delete(scopeA, "key-1") {
		h.t.Fatal("Delete of an in-progress record reported false, want true")
	}
	err := h.complete(scopeA, "key-1", "token-1", okResult("x"), h.at(time.Second), h.at(retention))
	h.wantLeaseLost(err, "Complete after the record was deleted")
	h.acquire(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(2*time.Second)), "the record was deleted")
	if h.delete(scopeA, "other-key") {
		h.t.Fatal("Delete of a key that was never claimed reported true, want false")
	}
}

func testDeleteCompleted(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	h.mustComplete(scopeA, "key-1", "token-1", okResult("x"), h.at(time.Second), h.at(retention))
	if !h.delete(scopeA, "key-1") {
		h.t.Fatal("Delete of a completed record reported false, want true")
	}
	if h.delete(scopeA, "key-1") {
		h.t.Fatal("second Delete of the same record reported true, want false")
	}
	h.acquire(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(2*time.Second)), "the completed record was deleted")
}

func testDeleteMissing(h *harness) {
	if h.delete(scopeA, "never-claimed") {
		h.t.Fatal("Delete of a key that was never claimed reported true, want false")
	}
	h.acquire(h.newClaim(scopeA, "never-claimed", "fp-1", "token-1", h.at(0)), "Delete must not create a record")
}

// ExpiredDeleter

func (h *harness) deleteExpired(now time.Time) int {
	h.t.Helper()
	n, err := h.s.(store.ExpiredDeleter).DeleteExpired(h.t.Context(), now)
	if err != nil {
		h.t.Fatalf("DeleteExpired(now %s): unexpected error: %v", h.when(now), err)
	}
	return n
}

func testDeleteExpiredEmpty(h *harness) {
	if n := h.deleteExpired(h.at(retention)); n != 0 {
		h.t.Fatalf("DeleteExpired on an empty store returned %d, want 0", n)
	}
}

func testDeleteExpired(h *harness) {
	now := h.at(time.Hour)
	type rec struct {
		key     string
		expires time.Time // the lease end, or the completion's expiry
		done    bool
	}
	recs := []rec{
		{"abandoned", h.at(lease), false},
		// Its lease ended at base+40m, but a late Complete may still land
		// until base+80m (LeaseEnd + (LeaseEnd - CreatedAt)).
		{"abandoned-in-grace", h.at(40 * time.Minute), false},
		{"completed-expired", h.at(10 * time.Minute), true},
		{"completed-expiring-now", now, true},
		{"in-progress-live", h.at(2 * time.Hour), false},
		{"completed-live", h.at(retention), true},
	}
	wantRemoved := 0
	for _, r := range recs {
		c := store.Claim{Scope: scopeA, Key: r.key, Fingerprint: "fp-" + r.key, Token: "token-" + r.key, Now: h.at(0), LeaseEnd: h.at(lease)}
		if !r.done {
			c.LeaseEnd = r.expires
		}
		h.acquire(c, "there is no record")
		if r.done {
			h.mustComplete(scopeA, r.key, c.Token, okResult(r.key), h.at(time.Second), r.expires)
		}
		if removable(r.expires, r.done, h.at(0), now) {
			wantRemoved++
		}
	}
	if n := h.deleteExpired(now); n != wantRemoved {
		h.t.Fatalf("DeleteExpired(now %s) returned %d, want %d: the records whose ExpiresAt is at or before now", h.when(now), n, wantRemoved)
	}
	if n := h.deleteExpired(now); n != 0 {
		h.t.Fatalf("second DeleteExpired(now %s) returned %d, want 0", h.when(now), n)
	}
	for _, r := range recs {
		if removable(r.expires, r.done, h.at(0), now) {
			// Only a removed record lets a claim at base+2s through.
			h.acquire(h.newClaim(scopeA, r.key, "fp-new", "token-new", h.at(2*time.Second)),
				fmt.Sprintf("DeleteExpired(now %s) must have removed this record, which expired at %s", h.when(now), h.when(r.expires)))
			continue
		}
		if !r.done && !now.Before(r.expires) {
			// Kept for a late Complete, yet a claim takes it over.
			h.acquire(h.newClaim(scopeA, r.key, "fp-new", "token-new", now),
				fmt.Sprintf("the record's lease ended at %s, before the now given to DeleteExpired", h.when(r.expires)))
			continue
		}
		h.blocked(h.newClaim(scopeA, r.key, "fp-new", "token-new", now),
			fmt.Sprintf("the record expires at %s, after the now given to DeleteExpired", h.when(r.expires)))
	}
}

// removable reports whether DeleteExpired at now must remove a record: a
// completed one from its ExpiresAt, an in-progress one claimed at created
// from LeaseEnd + (LeaseEnd - created).
func removable(expires time.Time, done bool, created, now time.Time) bool {
	if done {
		return !now.Before(expires)
	}
	return !now.Before(expires.Add(expires.Sub(created)))
}

// Extender

func (h *harness) extend(scope, key, token string, now, leaseEnd time.Time) error {
	return h.s.(store.Extender).Extend(h.t.Context(), hold(scope, key, token), now, leaseEnd)
}

func testExtendLive(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	newEnd := h.at(20 * time.Minute)
	if err := h.extend(scopeA, "key-1", "token-1", h.at(time.Minute), newEnd); err != nil {
		h.t.Fatalf("Extend of a live claim with its token: unexpected error: %v", err)
	}
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-2", "token-2", c.LeaseEnd),
		"the lease was extended past the old lease end")
	extended := inProgress(c)
	extended.leaseEnd, extended.expiresAt = newEnd, newEnd
	h.checkRecord("record after Extend", rec, extended)

	resp := okResult("late but extended")
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(10*time.Minute), h.at(retention))
	rec = h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-2", h.at(11*time.Minute)), "the record is completed")
	h.checkRecord("record completed inside the extended lease", rec, completed(c, resp, h.at(retention)))
}

// testExtendBatch: one call applies Extend's contract to each claim on
// its own: a live claim (on another scope too) moves, a claim with
// another token, a completed record and a missing one are lost, and none
// of those is changed.
func testExtendBatch(h *harness) {
	live := h.newClaim(scopeA, "key-live", "fp-1", "token-1", h.at(0))
	other := h.newClaim(scopeOther, "key-live", "fp-1", "token-3", h.at(0))
	held := h.newClaim(scopeA, "key-held", "fp-1", "token-1", h.at(0))
	done := h.newClaim(scopeA, "key-done", "fp-1", "token-1", h.at(0))
	for _, c := range []store.Claim{live, other, held, done} {
		h.acquire(c, "there is no record")
	}
	resp := okResult("done")
	h.mustComplete(scopeA, "key-done", "token-1", resp, h.at(time.Second), h.at(retention))
	now, newEnd := h.at(time.Minute), h.at(20*time.Minute)
	refs := []store.Extension{
		{Hold: hold(scopeA, "key-live", "token-1"), LeaseEnd: newEnd},
		{Hold: hold(scopeA, "key-held", "token-2"), LeaseEnd: newEnd},
		{Hold: hold(scopeA, "key-done", "token-1"), LeaseEnd: newEnd},
		{Hold: hold(scopeA, "key-missing", "token-1"), LeaseEnd: newEnd},
		{Hold: hold(scopeOther, "key-live", "token-3"), LeaseEnd: newEnd},
		{Hold: hold(scopeA, "key-live", "token-2"), LeaseEnd: newEnd}, // a stale claim beside the live one
	}
	errs := h.s.(store.BatchExtender).ExtendBatch(h.t.Context(), now, refs)
	if len(errs) != len(refs) {
		h.t.Fatalf("ExtendBatch returned %d errors for %d refs", len(errs), len(refs))
	}
	for i, lost := range []bool{false, true, true, true, false, true} {
		switch {
		case lost:
			h.wantLeaseLost(errs[i], fmt.Sprintf("ExtendBatch ref %d (%s %s)", i, refs[i].Key, refs[i].Token))
		case errs[i] != nil:
			h.t.Errorf("ExtendBatch ref %d (%s): unexpected error %v", i, refs[i].Key, errs[i])
		}
	}
	for _, c := range []store.Claim{live, other} {
		rec := h.blocked(h.newClaim(c.Scope, c.Key, "fp-2", "token-9", c.LeaseEnd), "the batch extended the lease")
		extended := inProgress(c)
		extended.leaseEnd, extended.expiresAt = newEnd, newEnd
		h.checkRecord("record after ExtendBatch", rec, extended)
	}
	h.acquire(h.newClaim(scopeA, "key-held", "fp-2", "token-2", held.LeaseEnd), "a wrong token must not have extended the lease")
	rec := h.blocked(h.newClaim(scopeA, "key-done", "fp-1", "token-2", h.at(2*time.Minute)), "the record is completed")
	h.checkRecord("completed record after ExtendBatch", rec, completed(done, resp, h.at(retention)))
}

func testExtendWrongToken(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	h.wantLeaseLost(h.extend(scopeA, "key-1", "token-2", h.at(time.Minute), h.at(time.Hour)),
		"Extend with another claim's token")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(2*time.Minute)), "the claim is still held")
	h.checkRecord("record after Extend with a wrong token", rec, inProgress(c))
	h.acquire(h.newClaim(scopeA, "key-1", "fp-2", "token-2", c.LeaseEnd), "the lease must not have been extended")
}

func testExtendCompleted(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	resp := okResult("done")
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(time.Second), h.at(retention))
	h.wantLeaseLost(h.extend(scopeA, "key-1", "token-1", h.at(2*time.Second), h.at(time.Hour)),
		"Extend of a completed record")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-2", h.at(3*time.Second)), "the record is completed")
	h.checkRecord("completed record after Extend", rec, completed(c, resp, h.at(retention)))
}

// testExtendAfterLeaseEnd: as for Complete, a claim nobody took over is
// still its token's, so a late Extend moves its lease end.
func testExtendAfterLeaseEnd(h *harness) {
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{
		{"AtLeaseEnd", lease},
		{"AfterLeaseEnd", lease + time.Minute},
	} {
		h.t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, h.s)
			key := "key-" + tc.name
			c := h.newClaim(scopeA, key, "fp-1", "token-1", h.at(0))
			h.acquire(c, "there is no record")
			now := h.at(tc.after)
			if err := h.extend(scopeA, key, "token-1", now, now.Add(lease)); err != nil {
				t.Fatalf("Extend at %s of a claim whose lease ended at %s and that nobody took over: %v, want it to land",
					h.when(now), h.when(c.LeaseEnd), err)
			}
			rec := h.blocked(h.newClaim(scopeA, key, "fp-2", "token-2", now.Add(time.Second)), "the late Extend renewed the lease")
			extended := inProgress(c)
			extended.leaseEnd, extended.expiresAt = now.Add(lease), now.Add(lease)
			h.checkRecord("record after a late Extend", rec, extended)
		})
	}
}

func testExtendMissing(h *harness) {
	h.wantLeaseLost(h.extend(scopeA, "never-claimed", "token-1", h.at(0), h.at(lease)),
		"Extend of a key that was never claimed")
	h.acquire(h.newClaim(scopeA, "never-claimed", "fp-1", "token-1", h.at(time.Second)), "Extend must not create a record")

	h.acquire(h.newClaim(scopeA, "released", "fp-1", "token-1", h.at(0)), "there is no record")
	if err := h.s.Release(h.t.Context(), hold(scopeA, "released", "token-1")); err != nil {
		h.t.Fatalf("Release with the right token: unexpected error: %v", err)
	}
	h.wantLeaseLost(h.extend(scopeA, "released", "token-1", h.at(time.Second), h.at(lease)),
		"Extend of a released claim")
}

func testExtendAfterTakeover(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-old", "token-old", h.at(0)), "there is no record")
	taker := h.newClaim(scopeA, "key-1", "fp-new", "token-new", h.at(lease))
	h.acquire(taker, "the old claim's lease has ended")
	h.wantLeaseLost(h.extend(scopeA, "key-1", "token-old", h.at(time.Minute), h.at(time.Hour)),
		"Extend with the token of a claim that was taken over")
	h.wantLeaseLost(h.extend(scopeA, "key-1", "token-old", taker.LeaseEnd.Add(time.Second), taker.LeaseEnd.Add(time.Hour)),
		"Extend with the token of a claim that was taken over, after the taker's lease ended")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-x", "token-x", taker.Now.Add(time.Second)), "the new claim holds the key")
	h.checkRecord("new owner's record after the old owner's Extend", rec, inProgress(taker))
}

// Evicter

func (h *harness) evict(scope, key, token string) error {
	return h.s.(store.Evicter).Evict(h.t.Context(), hold(scope, key, token))
}

func testEvictInProgress(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	if err := h.evict(scopeA, "key-1", "token-1"); err != nil {
		h.t.Fatalf("Evict of an in-progress record with its token: %v", err)
	}
	h.acquire(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(time.Second)), "the record was evicted")
}

func testEvictCompleted(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	h.mustComplete(scopeA, "key-1", "token-1", okResult("truncated"), h.at(time.Second), h.at(retention))
	if err := h.evict(scopeA, "key-1", "token-1"); err != nil {
		h.t.Fatalf("Evict of a completed record with the token that completed it: %v", err)
	}
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-2", h.at(2*time.Second)), "the completed record was evicted")
}

func testEvictWrongToken(h *harness) {
	c := h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0))
	h.acquire(c, "there is no record")
	h.wantLeaseLost(h.evict(scopeA, "key-1", "token-2"), "Evict of an in-progress record with another token")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-2", "token-2", h.at(time.Second)), "the claim is still held")
	h.checkRecord("record after Evict with a wrong token", rec, inProgress(c))

	resp := okResult("done")
	h.mustComplete(scopeA, "key-1", "token-1", resp, h.at(2*time.Second), h.at(retention))
	h.wantLeaseLost(h.evict(scopeA, "key-1", "token-2"), "Evict of a completed record with another token")
	rec = h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-3", h.at(3*time.Second)), "the record is completed")
	h.checkRecord("completed record after Evict with a wrong token", rec, completed(c, resp, h.at(retention)))
}

// testEvictAfterTakeover: the record expired and a retry claimed the key;
// the first request's Evict must not delete the retry's claim.
func testEvictAfterTakeover(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-old", h.at(0)), "there is no record")
	h.mustComplete(scopeA, "key-1", "token-old", okResult("old"), h.at(time.Second), h.at(time.Minute))
	taker := h.newClaim(scopeA, "key-1", "fp-1", "token-new", h.at(2*time.Minute))
	h.acquire(taker, "the completed record has expired")
	h.wantLeaseLost(h.evict(scopeA, "key-1", "token-old"), "Evict with the token of a record that expired and was taken over")
	rec := h.blocked(h.newClaim(scopeA, "key-1", "fp-1", "token-x", taker.Now.Add(time.Second)), "the new claim holds the key")
	h.checkRecord("new owner's record after the old owner's Evict", rec, inProgress(taker))
}

func testEvictMissing(h *harness) {
	h.wantLeaseLost(h.evict(scopeA, "never-claimed", "token-1"), "Evict of a key that was never claimed")
	h.acquire(h.newClaim(scopeA, "never-claimed", "fp-1", "token-1", h.at(0)), "Evict must not create a record")
}

// Clock

// clockTolerance is how far a store's clock may be from this process's in
// the suite: both run on machines that keep time, usually the same one.
const clockTolerance = 5 * time.Second

func (h *harness) storeNow() time.Time {
	h.t.Helper()
	t, err := h.s.(store.Clock).Now(h.t.Context())
	if err != nil {
		h.t.Fatalf("Now: %v", err)
	}
	if t.IsZero() {
		h.t.Fatal("Now returned the zero time")
	}
	return t
}

func testClockNearLocal(h *harness) {
	before := time.Now()
	got := h.storeNow()
	after := time.Now()
	if got.Before(before.Add(-clockTolerance)) || got.After(after.Add(clockTolerance)) {
		h.t.Fatalf("Now = %v, more than %v from this process's clock (%v to %v)", got, clockTolerance, before, after)
	}
}

func testClockForward(h *harness) {
	first := h.storeNow()
	time.Sleep(20 * time.Millisecond)
	second := h.storeNow()
	if d := second.Sub(first); d < 10*time.Millisecond || d > clockTolerance {
		h.t.Fatalf("two calls of Now 20ms apart returned times %v apart, want about 20ms", d)
	}
}

// Notifier

func (h *harness) watch(scope, key string) (<-chan struct{}, func()) {
	h.t.Helper()
	ch, stop, err := h.s.(store.Notifier).Watch(h.t.Context(), store.Ref{Scope: scope, Key: key})
	if err != nil {
		h.t.Fatalf("Watch(scope %q, key %q): unexpected error: %v", scope, key, err)
	}
	if ch == nil || stop == nil {
		h.t.Fatalf("Watch(scope %q, key %q) returned a nil channel or stop function", scope, key)
	}
	h.t.Cleanup(stop)
	return ch, stop
}

func (h *harness) waitFired(ch <-chan struct{}, event string) {
	h.t.Helper()
	select {
	case <-ch:
	case <-time.After(notifyTimeout):
		h.t.Fatalf("watch did not fire within %s of %s", notifyTimeout, event)
	}
}

func testWatchComplete(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	ch, _ := h.watch(scopeA, "key-1")
	h.mustComplete(scopeA, "key-1", "token-1", okResult("x"), h.at(time.Second), h.at(retention))
	h.waitFired(ch, "Complete")
}

func testWatchRelease(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	ch, _ := h.watch(scopeA, "key-1")
	if err := h.s.Release(h.t.Context(), hold(scopeA, "key-1", "token-1")); err != nil {
		h.t.Fatalf("Release with the right token: unexpected error: %v", err)
	}
	h.waitFired(ch, "Release")
}

func testWatchDelete(h *harness) {
	if !implements[store.Deleter](h.s) {
		h.t.Skipf("%T does not implement store.Deleter", h.s)
	}
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	ch, _ := h.watch(scopeA, "key-1")
	if !h.delete(scopeA, "key-1") {
		h.t.Fatal("Delete of an in-progress record reported false, want true")
	}
	h.waitFired(ch, "Delete")
}

func testWatchSeveral(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	chans := make([]<-chan struct{}, 3)
	for i := range chans {
		chans[i], _ = h.watch(scopeA, "key-1")
	}
	h.mustComplete(scopeA, "key-1", "token-1", okResult("x"), h.at(time.Second), h.at(retention))
	for i, ch := range chans {
		h.waitFired(ch, fmt.Sprintf("Complete (watcher %d of %d)", i+1, len(chans)))
	}
}

func testWatchStopTwice(h *harness) {
	h.acquire(h.newClaim(scopeA, "key-1", "fp-1", "token-1", h.at(0)), "there is no record")
	_, stop := h.watch(scopeA, "key-1")
	stop()
	stop()
	// A stopped watch must not disturb a later one, nor the store.
	ch, stop2 := h.watch(scopeA, "key-1")
	h.mustComplete(scopeA, "key-1", "token-1", okResult("x"), h.at(time.Second), h.at(retention))
	h.waitFired(ch, "Complete after an earlier watch was stopped twice")
	stop2()
	stop2()
}

// TxBeginner

type txCtxKey struct{}

func (h *harness) begin(ctx context.Context, scope, key, token string) store.Tx {
	h.t.Helper()
	tx, err := h.s.(store.TxBeginner).BeginTx(ctx, hold(scope, key, token))
	if err != nil {
		h.t.Fatalf("BeginTx(%q, %q): %v", scope, key, err)
	}
	return tx
}

// testTxCommit: Commit in a live transaction stores the result byte for
// byte, Failed or not (Failed only matters once the transaction ended),
// and the caller may reuse the result's memory once Commit returns.
func testTxCommit(h *harness) {
	for _, failed := range []bool{false, true} {
		key := fmt.Sprintf("tx-failed-%t", failed)
		c := h.newClaim(scopeA, key, "fp-1", "token-1", h.at(0))
		h.acquire(c, "claiming before the transaction")
		tx := h.begin(h.t.Context(), scopeA, key, "token-1")
		parent := context.WithValue(h.t.Context(), txCtxKey{}, "kept")
		if ctx := tx.Context(parent); ctx == nil || ctx.Value(txCtxKey{}) != "kept" {
			h.t.Fatal("Tx.Context must derive from the parent it is given, keeping its values")
		}
		res := okResult("committed")
		want := snapshot(res)
		if err := tx.Commit(h.t.Context(), store.Completion{Result: res, Failed: failed, Now: h.at(time.Second), ExpiresAt: h.at(time.Hour)}); err != nil {
			h.t.Fatalf("Commit (Failed %t) in a live transaction: %v", failed, err)
		}
		copy(res.Head, "CHANGED!")
		copy(res.Body, "CHANGED!")
		if err := tx.Rollback(h.t.Context()); err != nil {
			h.t.Fatalf("Rollback after Commit must be a no-op, got %v", err)
		}
		rec := h.blocked(h.newClaim(scopeA, key, "fp-1", "token-2", h.at(2*time.Second)), "a committed record blocks a claim")
		h.checkRecord(fmt.Sprintf("record after Commit (Failed %t)", failed), rec, completed(c, want, h.at(time.Hour)))
	}
}

// testTxCommitAfterBeginCtx ends the context BeginTx was given before
// Commit: the engine bounds BeginTx with a store timeout that it ends at
// once, so the transaction must outlive it (database/sql's BeginTx, for
// one, rolls back when its context ends).
func testTxCommitAfterBeginCtx(h *harness) {
	h.acquire(h.newClaim(scopeA, "tx", "fp-1", "token-1", h.at(0)), "claiming before the transaction")
	ctx, cancel := context.WithCancel(h.t.Context())
	tx := h.begin(ctx, scopeA, "tx", "token-1")
	cancel()
	time.Sleep(50 * time.Millisecond)
	if err := tx.Commit(h.t.Context(), store.Completion{Result: okResult("late"), Now: h.at(time.Second), ExpiresAt: h.at(time.Hour)}); err != nil {
		h.t.Fatalf("Commit after the BeginTx context ended: %v", err)
	}
}

func testTxCommitAfterTakeover(h *harness) {
	h.acquire(h.newClaim(scopeA, "tx", "fp-1", "token-1", h.at(0)), "claiming before the transaction")
	tx := h.begin(h.t.Context(), scopeA, "tx", "token-1")
	defer tx.Rollback(h.t.Context())
	if holdsClaim(tx) {
		h.t.Skip("the transaction holds the claim: no takeover can happen while it lives (ClaimHolderBlocksTakeover)")
	}
	// The lease passes and another request takes the key over.
	h.acquire(h.newClaim(scopeA, "tx", "fp-2", "token-2", h.at(time.Hour)), "taking over after the lease")
	err := tx.Commit(h.t.Context(), store.Completion{Result: okResult("lost"), Now: h.at(time.Hour + time.Second), ExpiresAt: h.at(2 * time.Hour)})
	h.wantLeaseLost(err, "Commit after a takeover")
	rec := h.blocked(h.newClaim(scopeA, "tx", "fp-2", "token-3", h.at(time.Hour+2*time.Second)), "the new owner's claim")
	if rec.State != store.InProgress || rec.Fingerprint != "fp-2" {
		h.t.Fatalf("a lost Commit changed the new owner's record: %s", h.formatRecord(rec))
	}
}

func testTxRollback(h *harness) {
	h.acquire(h.newClaim(scopeA, "tx", "fp-1", "token-1", h.at(0)), "claiming before the transaction")
	tx := h.begin(h.t.Context(), scopeA, "tx", "token-1")
	if err := tx.Rollback(h.t.Context()); err != nil {
		h.t.Fatalf("Rollback: %v", err)
	}
	if err := tx.Rollback(h.t.Context()); err != nil {
		h.t.Fatalf("a second Rollback must be a no-op, got %v", err)
	}
	if err := h.s.Release(h.t.Context(), hold(scopeA, "tx", "token-1")); err != nil {
		h.t.Fatalf("Release after Rollback: %v", err)
	}
	h.acquire(h.newClaim(scopeA, "tx", "fp-1", "token-2", h.at(time.Second)), "the key is free after Rollback and Release")
}

func holdsClaim(tx store.Tx) bool {
	ch, ok := tx.(store.ClaimHolder)
	return ok && ch.HoldsClaim()
}

// testTxHoldsClaim: a transaction that holds its claim (store.ClaimHolder)
// keeps the key from every other request while it lives, past its lease
// end too, without an Extend, and commits the record.
func testTxHoldsClaim(h *harness) {
	c := h.newClaim(scopeA, "tx", "fp-1", "token-1", h.at(0))
	h.acquire(c, "claiming before the transaction")
	tx := h.begin(h.t.Context(), scopeA, "tx", "token-1")
	defer tx.Rollback(h.t.Context())
	if !holdsClaim(tx) {
		h.t.Skip("the transaction does not hold its claim (store.ClaimHolder); the engine beats for it")
	}
	// Past the lease end, with no Extend: the transaction still holds it.
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	res, err := h.s.Claim(ctx, h.newClaim(scopeA, "tx", "fp-2", "token-2", h.at(time.Hour)))
	switch {
	case err != nil:
		h.t.Fatalf("Claim past the lease end of a claim a live transaction holds: %v, want the in-progress record at once", err)
	case res.Acquired:
		h.t.Fatal("Claim past the lease end took over a claim a live transaction holds")
	case res.Existing.State != store.InProgress || res.Existing.Fingerprint != "fp-1":
		h.t.Fatalf("Claim returned %s, want the transaction's in-progress claim", h.formatRecord(res.Existing))
	}
	if err := tx.Commit(h.t.Context(), store.Completion{Result: okResult("held"), Now: h.at(time.Hour + time.Second), ExpiresAt: h.at(2 * time.Hour)}); err != nil {
		h.t.Fatalf("Commit of a transaction that held its claim past the lease end: %v", err)
	}
	rec := h.blocked(h.newClaim(scopeA, "tx", "fp-1", "token-3", h.at(time.Hour+2*time.Second)), "the record is completed")
	h.checkRecord("record after Commit", rec, completed(c, okResult("held"), h.at(2*time.Hour)))
}

// TxClaimer

// claimTx claims c with ClaimTx, which must acquire it and return a
// transaction that holds the claim.
func (h *harness) claimTx(ctx context.Context, c store.Claim, why string) store.Tx {
	h.t.Helper()
	res, tx, err := h.s.(store.TxClaimer).ClaimTx(ctx, c)
	switch {
	case err != nil:
		h.t.Fatalf("ClaimTx(%q) (%s): %v", c.Key, why, err)
	case !res.Acquired || tx == nil:
		h.t.Fatalf("ClaimTx(%q) (%s): Acquired %t, Tx %v, existing %s; want the claim and its transaction", c.Key, why, res.Acquired, tx, h.formatRecord(res.Existing))
	case !holdsClaim(tx):
		h.t.Fatalf("ClaimTx(%q): the transaction does not hold its claim (store.ClaimHolder), which a claim made in it must", c.Key)
	}
	return tx
}

// claimTxBlocked claims c with ClaimTx, which must not acquire it, and
// returns the record it answers with.
func (h *harness) claimTxBlocked(c store.Claim, why string) *store.Record {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	res, tx, err := h.s.(store.TxClaimer).ClaimTx(ctx, c)
	switch {
	case err != nil:
		h.t.Fatalf("ClaimTx(%q) (%s): %v, want the existing record at once", c.Key, why, err)
	case res.Acquired || tx != nil:
		if tx != nil {
			tx.Rollback(h.t.Context()) //nolint:errcheck // failing anyway
		}
		h.t.Fatalf("ClaimTx(%q) acquired the key (%s)", c.Key, why)
	case res.Existing == nil:
		h.t.Fatalf("ClaimTx(%q) returned neither a claim nor a record", c.Key)
	}
	return res.Existing
}

// testClaimTxHeld: a claim made in a transaction is seen in progress, with
// its fingerprint, by every other claim (ClaimTx and Claim, the same
// request and another, past the lease end too) and by Get, at once; the
// handler's view of the transaction keeps the parent's values; Commit
// stores the result, and the claim's token is the record's.
func testClaimTxHeld(h *harness) {
	c := h.newClaim(scopeA, "tx", "fp-1", "token-1", h.at(0))
	tx := h.claimTx(h.t.Context(), c, "a free key")
	defer tx.Rollback(h.t.Context())
	parent := context.WithValue(h.t.Context(), txCtxKey{}, "kept")
	if ctx := tx.Context(parent); ctx == nil || ctx.Value(txCtxKey{}) != "kept" {
		h.t.Fatal("Tx.Context must derive from the parent it is given, keeping its values")
	}
	for _, other := range []store.Claim{
		h.newClaim(scopeA, "tx", "fp-1", "token-2", h.at(time.Second)),
		h.newClaim(scopeA, "tx", "fp-2", "token-3", h.at(time.Second)),
		h.newClaim(scopeA, "tx", "fp-2", "token-4", h.at(time.Hour)), // past the lease end
	} {
		what := fmt.Sprintf("fingerprint %s at %s", other.Fingerprint, h.when(other.Now))
		if rec := h.claimTxBlocked(other, "a claim made in a live transaction holds the key"); rec.State != store.InProgress || rec.Fingerprint != "fp-1" {
			h.t.Fatalf("ClaimTx (%s) of a key a live transaction claimed returned %s, want it in progress with fingerprint fp-1", what, h.formatRecord(rec))
		}
		ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
		res, err := h.s.Claim(ctx, other)
		cancel()
		switch {
		case err != nil:
			h.t.Fatalf("Claim (%s) of a key a live transaction claimed: %v, want the in-progress record at once", what, err)
		case res.Acquired:
			h.t.Fatalf("Claim (%s) took a key a live transaction claimed", what)
		case res.Existing.State != store.InProgress || res.Existing.Fingerprint != "fp-1":
			h.t.Fatalf("Claim (%s) returned %s, want it in progress with fingerprint fp-1", what, h.formatRecord(res.Existing))
		}
	}
	if g, ok := h.s.(store.Getter); ok {
		rec, found, err := g.Get(h.t.Context(), c.Ref(), h.at(time.Second))
		if err != nil || !found || rec.State != store.InProgress || rec.Fingerprint != "fp-1" {
			h.t.Fatalf("Get of a key a live transaction claimed: found %t, %s, %v; want it in progress with fingerprint fp-1", found, h.formatRecord(&rec), err)
		}
	}
	res := okResult("committed")
	want := snapshot(res)
	if err := tx.Commit(h.t.Context(), store.Completion{Result: res, Now: h.at(2 * time.Second), ExpiresAt: h.at(time.Hour)}); err != nil {
		h.t.Fatalf("Commit of a claim made in the transaction: %v", err)
	}
	copy(res.Body, "CHANGED!")
	rec := h.claimTxBlocked(h.newClaim(scopeA, "tx", "fp-1", "token-5", h.at(3*time.Second)), "a committed record")
	h.checkRecord("record after Commit", rec, completed(c, want, h.at(time.Hour)))
	if err := h.s.Release(h.t.Context(), hold(scopeA, "tx", "token-1")); !errors.Is(err, store.ErrLeaseLost) {
		h.t.Fatalf("Release of the committed claim's token: %v, want ErrLeaseLost (the record is completed)", err)
	}
}

// testClaimTxRollback: Rollback ends the claim with the transaction: the
// key is free at once, before the lease end, for ClaimTx and Claim alike;
// the engine's Release of the old token afterwards changes nothing.
func testClaimTxRollback(h *harness) {
	tx := h.claimTx(h.t.Context(), h.newClaim(scopeA, "tx", "fp-1", "token-1", h.at(0)), "a free key")
	if err := tx.Rollback(h.t.Context()); err != nil {
		h.t.Fatalf("Rollback: %v", err)
	}
	if err := tx.Rollback(h.t.Context()); err != nil {
		h.t.Fatalf("a second Rollback must be a no-op, got %v", err)
	}
	tx2 := h.claimTx(h.t.Context(), h.newClaim(scopeA, "tx", "fp-2", "token-2", h.at(time.Second)), "the key is free after Rollback, within the first claim's lease")
	if err := h.s.Release(h.t.Context(), hold(scopeA, "tx", "token-1")); err != nil && !errors.Is(err, store.ErrLeaseLost) {
		h.t.Fatalf("Release of a rolled-back claim's token: %v, want nil or ErrLeaseLost", err)
	}
	if rec := h.claimTxBlocked(h.newClaim(scopeA, "tx", "fp-2", "token-3", h.at(2*time.Second)), "the second claim holds the key"); rec.State != store.InProgress || rec.Fingerprint != "fp-2" {
		h.t.Fatalf("the old token's Release changed the second claim: %s", h.formatRecord(rec))
	}
	if err := tx2.Rollback(h.t.Context()); err != nil {
		h.t.Fatalf("Rollback: %v", err)
	}
	h.acquire(h.newClaim(scopeA, "tx", "fp-1", "token-4", h.at(3*time.Second)), "Claim after the claims made in transactions rolled back")
}

// testClaimTxCtx ends the context ClaimTx was given before Commit: the
// engine bounds the claim with a store timeout that it ends at once, so
// the transaction must outlive it.
func testClaimTxCtx(h *harness) {
	ctx, cancel := context.WithCancel(h.t.Context())
	c := h.newClaim(scopeA, "tx", "fp-1", "token-1", h.at(0))
	tx := h.claimTx(ctx, c, "a free key")
	cancel()
	time.Sleep(50 * time.Millisecond)
	if err := tx.Commit(h.t.Context(), store.Completion{Result: okResult("late"), Now: h.at(time.Second), ExpiresAt: h.at(time.Hour)}); err != nil {
		h.t.Fatalf("Commit after the ClaimTx context ended: %v", err)
	}
	rec := h.claimTxBlocked(h.newClaim(scopeA, "tx", "fp-1", "token-2", h.at(2*time.Second)), "a committed record")
	h.checkRecord("record after Commit", rec, completed(c, okResult("late"), h.at(time.Hour)))
}

// testClaimTxExisting: ClaimTx answers with a record that holds the key
// as Claim does (in progress, completed, with another fingerprint) and
// opens no transaction; it takes over an expired record and an
// abandoned claim, and a rolled-back takeover leaves the key free.
func testClaimTxExisting(h *harness) {
	c := h.newClaim(scopeA, "done", "fp-1", "token-1", h.at(0))
	h.acquire(c, "a plain claim")
	if rec := h.claimTxBlocked(h.newClaim(scopeA, "done", "fp-2", "token-2", h.at(time.Second)), "a committed claim in progress"); rec.State != store.InProgress || rec.Fingerprint != "fp-1" {
		h.t.Fatalf("ClaimTx of a key in progress returned %s", h.formatRecord(rec))
	}
	h.mustComplete(scopeA, "done", "token-1", okResult("first"), h.at(2*time.Second), h.at(time.Hour))
	for _, fp := range []string{"fp-1", "fp-2"} {
		rec := h.claimTxBlocked(h.newClaim(scopeA, "done", fp, "token-3", h.at(3*time.Second)), "a completed record")
		h.checkRecord("ClaimTx of a completed key ("+fp+")", rec, completed(c, okResult("first"), h.at(time.Hour)))
	}
	// Expired: taken over; the takeover rolled back leaves it takeable.
	tx := h.claimTx(h.t.Context(), h.newClaim(scopeA, "done", "fp-2", "token-4", h.at(2*time.Hour)), "an expired record")
	if err := tx.Rollback(h.t.Context()); err != nil {
		h.t.Fatalf("Rollback: %v", err)
	}
	c2 := h.newClaim(scopeA, "done", "fp-3", "token-5", h.at(2*time.Hour+time.Second))
	tx = h.claimTx(h.t.Context(), c2, "an expired record, after a rolled-back takeover")
	if err := tx.Commit(h.t.Context(), store.Completion{Result: okResult("second"), Now: h.at(2*time.Hour + 2*time.Second), ExpiresAt: h.at(3 * time.Hour)}); err != nil {
		h.t.Fatalf("Commit of a takeover: %v", err)
	}
	rec := h.claimTxBlocked(h.newClaim(scopeA, "done", "fp-3", "token-6", h.at(2*time.Hour+3*time.Second)), "the takeover's record")
	h.checkRecord("record after a committed takeover", rec, completed(c2, okResult("second"), h.at(3*time.Hour)))
	// An abandoned claim (its lease ended, nothing holds it): taken over.
	h.acquire(h.newClaim(scopeA, "abandoned", "fp-1", "token-1", h.at(0)), "a plain claim")
	tx = h.claimTx(h.t.Context(), h.newClaim(scopeA, "abandoned", "fp-1", "token-2", h.at(time.Hour)), "a claim whose lease ended")
	if err := tx.Rollback(h.t.Context()); err != nil {
		h.t.Fatalf("Rollback: %v", err)
	}
}

// RunTxEnded checks Tx.Commit after the handler's transaction ended
// before the engine could commit it: end ends the transaction that ctx
// carries (ctx is what Tx.Context returned), as a handler that commits or
// rolls back the transaction itself would. Commit then stores a Failed
// completion on its own, as Complete would (the outcome says nothing
// happened, which is what remains), and refuses any other with an error,
// storing nothing: the record stays the claim's, in progress, for the
// engine to release. newStore is as for [RunStore]; it must return a
// [store.TxBeginner]. When it is a [store.TxClaimer] too, the checks run
// again (subtest ClaimTx) on a transaction ClaimTx started with its claim.
func RunTxEnded(t *testing.T, newStore func(t *testing.T) store.Store, end func(t *testing.T, ctx context.Context)) {
	t.Helper()
	runTxEnded(t, newStore, end, false)
	if implements[store.TxClaimer](newStore(t)) {
		t.Run("ClaimTx", func(t *testing.T) { runTxEnded(t, newStore, end, true) })
	}
}

// runTxEnded is RunTxEnded for a transaction BeginTx started, or, with
// claimTx, one ClaimTx started with its claim. The claim went with a
// transaction that rolled back: after a refused Commit, Release may then
// find nothing (ErrLeaseLost), and a Failed completion is stored on its
// own all the same.
func runTxEnded(t *testing.T, newStore func(t *testing.T) store.Store, end func(t *testing.T, ctx context.Context), claimTx bool) {
	for _, failed := range []bool{true, false} {
		name := "NotFailedRefused"
		if failed {
			name = "FailedStoredOnItsOwn"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, newStore(t))
			if !implements[store.TxBeginner](h.s) {
				t.Fatalf("%T does not implement store.TxBeginner", h.s)
			}
			c := h.newClaim(scopeA, "tx-ended", "fp-1", "token-1", h.at(0))
			var tx store.Tx
			if claimTx {
				tx = h.claimTx(t.Context(), c, "a free key")
			} else {
				h.acquire(c, "claiming before the transaction")
				tx = h.begin(t.Context(), scopeA, "tx-ended", "token-1")
			}
			defer tx.Rollback(t.Context())
			end(t, tx.Context(t.Context()))
			res := okResult("after the end")
			err := tx.Commit(t.Context(), store.Completion{Result: res, Failed: failed, Now: h.at(time.Second), ExpiresAt: h.at(time.Hour)})
			if failed {
				if err != nil {
					t.Fatalf("Commit of a Failed completion after the transaction ended: %v, want it stored on its own", err)
				}
				rec := h.blocked(h.newClaim(scopeA, "tx-ended", "fp-1", "token-2", h.at(2*time.Second)), "the Failed completion was stored")
				h.checkRecord("record after a Failed Commit of an ended transaction", rec, completed(c, okResult("after the end"), h.at(time.Hour)))
				return
			}
			if err == nil {
				t.Fatal("Commit of a non-Failed completion after the transaction ended succeeded; the handler's writes may be gone, so it must be refused")
			}
			if errors.Is(err, store.ErrLeaseLost) {
				t.Fatalf("Commit of a non-Failed completion after the transaction ended: %v; the claim still holds the record, so not ErrLeaseLost", err)
			}
			if claimTx {
				// A rollback took the claim, or the handler's commit kept
				// it: the engine releases it in either case.
				if err := h.s.Release(t.Context(), hold(scopeA, "tx-ended", "token-1")); err != nil && !errors.Is(err, store.ErrLeaseLost) {
					t.Fatalf("Release after a refused Commit: %v, want the claim released (or found gone)", err)
				}
				h.acquire(h.newClaim(scopeA, "tx-ended", "fp-1", "token-3", h.at(3*time.Second)), "the claim was released")
				return
			}
			rec := h.blocked(h.newClaim(scopeA, "tx-ended", "fp-1", "token-2", h.at(2*time.Second)), "the claim still holds the key")
			h.checkRecord("record after a refused Commit", rec, inProgress(c))
			if err := h.s.Release(t.Context(), hold(scopeA, "tx-ended", "token-1")); err != nil {
				t.Fatalf("Release after a refused Commit: %v, want the claim released", err)
			}
			h.acquire(h.newClaim(scopeA, "tx-ended", "fp-1", "token-3", h.at(3*time.Second)), "the claim was released")
		})
	}
}
