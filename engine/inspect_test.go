package engine

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"mvkv/internal/heap"
)

func TestVerifyAndDumpWAL(t *testing.T) {
	dir := t.TempDir()
	loadTPCB(t, dir)
	db := openTest(t, dir, Options{})
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 100; i++ {
		if _, _, err := tpcbTxn(context.Background(), db, r, 0, i, 1); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, db, "big", strings.Repeat("x", 100000))
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Tuples == 0 {
		t.Fatalf("verify of a healthy database:\n%s", rep)
	}
	// A wrong index entry is found.
	e := db.idx.get([]byte("a:0001"))
	good := e.head.Load()
	e.head.Store(heap.TID{Block: 0, Slot: 0}.Pack())
	rep, _ = db.Verify()
	if rep.OK() || !strings.Contains(rep.String(), "a:0001") {
		t.Fatalf("verify missed a wrong index entry:\n%s", rep)
	}
	e.head.Store(good)
	db.Close()

	var out bytes.Buffer
	if err := DumpWAL(nil, dir, 0, 0, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"type: CHECKPOINT,", "records; the valid log ends at"} {
		if !strings.Contains(s, want) {
			t.Fatalf("waldump output lacks %q:\n%.2000s", want, s)
		}
	}
}
