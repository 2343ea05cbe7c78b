package engine

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// An error that aborted a transaction reads with the engine's prefix
// once, both from a later call of the aborted transaction and from its
// Commit, and still matches the error that aborted it.
func TestAbortErrorPrefixedOnce(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "n", "0")
	tx, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Get([]byte("n")); err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, "n", "1")
	if err := tx.Put([]byte("n"), []byte("2")); !errors.Is(err, ErrSerializationFailure) {
		t.Fatalf("write after a concurrent update: %v; want ErrSerializationFailure", err)
	}
	_, err = tx.Get([]byte("n"))
	if want := "mvkv: current transaction is aborted: could not serialize access due to concurrent update"; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "mvkv: ") != 1 {
		t.Errorf("Get in the aborted transaction: %v; want it to begin %q, with no other \"mvkv: \"", err, want)
	}
	if !errors.Is(err, ErrSerializationFailure) || !IsRetryable(err) {
		t.Errorf("Get in the aborted transaction: %v does not match ErrSerializationFailure or is not retryable", err)
	}
	err = tx.Commit()
	if want := "mvkv: transaction rolled back: could not serialize access due to concurrent update"; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "mvkv: ") != 1 {
		t.Errorf("Commit of the aborted transaction: %v; want it to begin %q, with no other \"mvkv: \"", err, want)
	}
	if !errors.Is(err, ErrSerializationFailure) || !IsRetryable(err) {
		t.Errorf("Commit of the aborted transaction: %v does not match ErrSerializationFailure or is not retryable", err)
	}
}

func TestWrapf(t *testing.T) {
	pe := &fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}
	for _, c := range []struct {
		err  error
		want string
	}{
		{ErrDeadlock, "mvkv: transaction rolled back: deadlock detected"},
		{wrapf(ErrDeadlock, "current transaction is aborted"), "mvkv: transaction rolled back: current transaction is aborted: deadlock detected"},
		{pe, "mvkv: transaction rolled back: open x: file does not exist"},
		{errors.New("heap: mvkv: x"), "mvkv: transaction rolled back: heap: mvkv: x"},
	} {
		err := wrapf(c.err, "transaction rolled back")
		if err.Error() != c.want {
			t.Errorf("wrapf(%q) = %q; want %q", c.err, err, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("wrapf(%q) does not match what it wraps", c.err)
		}
	}
	var got *fs.PathError
	if err := wrapf(wrapf(pe, "read x"), "lock y"); !errors.As(err, &got) || got != pe || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.As through two wraps: %v", err)
	}
}
