package sqlbase

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem/core/store"
)

// TestCommitEnded: after the handler ended its transaction, a failed
// outcome is stored on its own and any other is refused.
func TestCommitEnded(t *testing.T) {
	errStore := errors.New("store down")
	for _, tc := range []struct {
		name     string
		failed   bool
		complete error
		stored   bool
		want     error
	}{
		{"success", false, nil, false, ErrTxFailed},
		{"success, store down", false, errStore, false, ErrTxFailed},
		{"failed", true, nil, true, nil},
		{"failed, lease lost", true, store.ErrLeaseLost, true, store.ErrLeaseLost},
		{"failed, store down", true, errStore, true, errStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored := false
			err := CommitEnded("teststore", tc.failed, func() error { stored = true; return tc.complete })
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
		{"lease lost", store.ErrLeaseLost, errRollback, []error{store.ErrLeaseLost}, store.ErrLeaseLost.Error()},
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
		{"no row", 0, nil, store.ErrLeaseLost, store.ErrLeaseLost.Error()},
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
