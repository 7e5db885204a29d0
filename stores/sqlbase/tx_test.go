package sqlbase

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	idem "github.com/idemkit/idem/core"
)

// TestCommitEnded: after the handler ended its transaction, an error
// answer is stored on its own and a success is refused.
func TestCommitEnded(t *testing.T) {
	errStore := errors.New("store down")
	for _, tc := range []struct {
		status   int
		complete error
		stored   bool
		want     error
	}{
		{200, nil, false, ErrTxFailed},
		{201, nil, false, ErrTxFailed},
		{399, nil, false, ErrTxFailed},
		{400, nil, true, nil},
		{409, idem.ErrLeaseLost, true, idem.ErrLeaseLost},
		{500, errStore, true, errStore},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			stored := false
			err := CommitEnded("teststore", tc.status, func() error { stored = true; return tc.complete })
			if stored != tc.stored || !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("stored %v, error %v; want %v, %v", stored, err, tc.stored, tc.want)
			}
			if errors.Is(err, ErrTxFailed) && !strings.HasPrefix(err.Error(), "teststore: commit: ") {
				t.Errorf("error %q lacks the store's prefix", err)
			}
		})
	}
}

// TestCommitFailed: a lost lease is returned as it is; any other error
// carries the store's prefix and the rollback's error.
func TestCommitFailed(t *testing.T) {
	errExec, errRollback := errors.New("exec failed"), errors.New("rollback failed")
	for _, tc := range []struct {
		name     string
		err, rb  error
		want     []error
		wantText string
	}{
		{"lease lost", idem.ErrLeaseLost, errRollback, []error{idem.ErrLeaseLost}, idem.ErrLeaseLost.Error()},
		{"failed", errExec, nil, []error{errExec}, "teststore: commit: exec failed"},
		{"failed, rollback too", errExec, errRollback, []error{errExec, errRollback}, "teststore: commit: exec failed\nrollback failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CommitFailed("teststore", tc.err, tc.rb)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("error %v does not wrap %v", err, w)
				}
			}
			if err.Error() != tc.wantText {
				t.Errorf("error %q, want %q", err, tc.wantText)
			}
		})
	}
}

func TestCheckStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		ok     bool
	}{{idem.MinStatus - 1, false}, {idem.MinStatus, true}, {404, true}, {idem.MaxStatus, true}, {idem.MaxStatus + 1, false}, {0, false}} {
		err := CheckStatus("teststore", tc.status)
		if (err == nil) != tc.ok || err != nil && !strings.HasPrefix(err.Error(), "teststore: complete: status") {
			t.Errorf("CheckStatus(%d) = %v, want ok %v", tc.status, err, tc.ok)
		}
	}
}

func TestIgnoreTxDone(t *testing.T) {
	other := errors.New("other")
	for _, tc := range []struct{ in, want error }{
		{nil, nil},
		{sql.ErrTxDone, nil},
		{fmt.Errorf("rollback: %w", sql.ErrTxDone), nil},
		{other, other},
	} {
		if got := IgnoreTxDone(tc.in); got != tc.want {
			t.Errorf("IgnoreTxDone(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestWriteResult(t *testing.T) {
	errExec := errors.New("exec failed")
	for _, tc := range []struct {
		name string
		n    int64
		err  error
		want error
		text string
	}{
		{"changed", 1, nil, nil, ""},
		{"no row", 0, nil, idem.ErrLeaseLost, idem.ErrLeaseLost.Error()},
		{"failed", 0, errExec, errExec, "teststore: release: exec failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteResult("teststore", "release", tc.n, tc.err)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || err.Error() != tc.text {
				t.Errorf("error %q, want %q wrapping %v", err, tc.text, tc.want)
			}
		})
	}
}
