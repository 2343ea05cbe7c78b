package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestUpdateBacksOffBetweenRuns: DB.Update pauses before each rerun of a
// function that failed with a serialization failure or a deadlock, for a
// wait that grows with the rerun's number and stays within its bounds.
func TestUpdateBacksOffBetweenRuns(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	var waits []time.Duration
	var ns []int
	db.testRetryWait = func(n int, d time.Duration) time.Duration {
		ns = append(ns, n)
		waits = append(waits, d)
		return d
	}
	runs := 0
	err := db.Update(context.Background(), func(tx *Txn) error {
		runs++
		switch runs {
		case 1:
			return fmt.Errorf("lost: %w", ErrSerializationFailure)
		case 2:
			return fmt.Errorf("lost: %w", ErrDeadlock)
		}
		return tx.Put([]byte("k"), []byte("v"))
	})
	if err != nil || runs != 3 {
		t.Fatalf("Update = %v after %d runs; want nil after 3", err, runs)
	}
	if len(ns) != 2 || ns[0] != 1 || ns[1] != 2 {
		t.Fatalf("backoffs before reruns %v; want one before each of reruns 1 and 2", ns)
	}
	for i, d := range waits {
		lo, hi := retryBackoff(i+1, 0), retryBackoff(i+1, 1)
		if d < lo || d > hi {
			t.Errorf("wait before rerun %d: %v, outside [%v, %v]", i+1, d, lo, hi)
		}
	}
}

// TestRetryBackoffBounds: the pause starts at tens of microseconds, at
// least doubles its lower bound with each rerun until the cap, and never
// passes the cap, however many reruns.
func TestRetryBackoffBounds(t *testing.T) {
	if lo, hi := retryBackoff(1, 0), retryBackoff(1, 0.999999); lo < 5*time.Microsecond || hi > 50*time.Microsecond || lo >= hi {
		t.Fatalf("first pause in [%v, %v]; want a jittered range of tens of microseconds", lo, hi)
	}
	prev := time.Duration(0)
	for n := 1; n < 200; n++ {
		lo, hi := retryBackoff(n, 0), retryBackoff(n, 0.999999)
		if hi > retryBackoffMax || lo < prev {
			t.Fatalf("rerun %d: pause in [%v, %v] after a lower bound of %v; cap %v", n, lo, hi, prev, retryBackoffMax)
		}
		prev = lo
	}
	if prev != retryBackoffMax/2 {
		t.Fatalf("lower bound settles at %v; want %v", prev, retryBackoffMax/2)
	}
}

// TestUpdateBackoffEndsWithContext: a context canceled while DB.Update
// pauses before a rerun ends the pause at once; the error wraps both the
// context's error and the serialization failure that caused the rerun,
// and the function does not run again.
func TestUpdateBackoffEndsWithContext(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan struct{})
	db.testRetryWait = func(int, time.Duration) time.Duration {
		close(waiting)
		return time.Hour // only the context can end it
	}
	go func() {
		<-waiting
		cancel()
	}()
	runs := 0
	err := db.Update(ctx, func(tx *Txn) error {
		runs++
		if err := tx.Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		return fmt.Errorf("lost: %w", ErrSerializationFailure)
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrSerializationFailure) {
		t.Fatalf("Update = %v; want an error wrapping context.Canceled and ErrSerializationFailure", err)
	}
	if runs != 1 {
		t.Fatalf("the function ran %d times; want 1", runs)
	}
	if _, ok := get(t, db, "k"); ok {
		t.Fatal("the rolled-back write is visible")
	}
}

// TestViewBackoffEndsWithClose: Close during the pause ends it with
// ErrClosed.
func TestViewBackoffEndsWithClose(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	waiting := make(chan struct{})
	db.testRetryWait = func(int, time.Duration) time.Duration {
		close(waiting)
		return time.Hour
	}
	closed := make(chan error, 1)
	go func() {
		<-waiting
		closed <- db.Close()
	}()
	err := db.View(context.Background(), func(*Txn) error {
		return fmt.Errorf("lost: %w", ErrDeadlock)
	})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("View = %v; want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}
