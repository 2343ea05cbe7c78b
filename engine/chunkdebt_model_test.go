package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// debtModel is what the writer of a crash test was told: the values of
// acknowledged commits, and the writes of the transaction committing now,
// which a crash copy may hold all of or none of.
type debtModel struct {
	mu      sync.Mutex
	acked   map[string]string // keys absent: deleted, or never written
	pending map[string]*string
}

// check fails unless every key of m reads in db as acknowledged, or as the
// pending transaction left it, all its keys alike.
func (m *debtModel) check(db *DB) error {
	m.mu.Lock()
	acked := make(map[string]string, len(m.acked))
	keys := map[string]bool{}
	for k, v := range m.acked {
		acked[k], keys[k] = v, true
	}
	pending := make(map[string]*string, len(m.pending))
	for k, v := range m.pending {
		pending[k], keys[k] = v, true
	}
	m.mu.Unlock()
	allOld, allNew := true, true
	for k := range keys {
		var got []byte
		err := db.View(context.Background(), func(tx *Txn) error {
			v, err := tx.Get([]byte(k))
			got = v
			return err
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("get %s: %w", k, err)
		}
		found := err == nil
		a, present := acked[k]
		old := found == present && (!found || string(got) == a)
		p, isPending := pending[k]
		if !isPending {
			if !old {
				return fmt.Errorf("key %s: found %v (%d bytes), acknowledged %v (%d bytes)", k, found, len(got), present, len(a))
			}
			continue
		}
		nw := (p == nil && !found) || (p != nil && found && string(got) == *p)
		if !old && !nw {
			return fmt.Errorf("key %s: found %v (%d bytes), neither as acknowledged nor as the transaction in flight wrote it", k, found, len(got))
		}
		allOld, allNew = allOld && old, allNew && nw
	}
	if !allOld && !allNew {
		return errors.New("the transaction in flight is half there")
	}
	return nil
}

// debtChunkNamed fails if a chunk in db's vacuum debt is still on its
// page, with the entry's xmin, and named by a version (or a directory of
// its value) on the heap: the next vacuum would free it under that
// version.
func debtChunkNamed(db *DB) error {
	type tuple struct {
		xmin uint64
		mask uint16
		val  []byte
	}
	tuples := map[heap.TID]tuple{}
	for blk := range db.pool.NBlocks() {
		buf, err := db.pool.Get(blk)
		if err != nil {
			return err
		}
		buf.RLock()
		page := buf.Page()
		if !heap.IsNew(page) {
			for s := range heap.NumSlots(page) {
				raw, err := heap.Tuple(page, uint16(s))
				if err != nil {
					continue
				}
				if h, _, v, err := heap.DecodeTuple(raw); err == nil {
					tuples[heap.TID{Block: blk, Slot: uint16(s)}] = tuple{h.Xmin, h.Infomask, append([]byte(nil), v...)}
				}
			}
		}
		buf.RUnlock()
		buf.Release()
	}
	named := map[chunkID]heap.TID{}
	for tid, t := range tuples {
		if t.mask&heap.External == 0 || t.mask&heap.Chunk != 0 {
			continue
		}
		ctids, err := chunkTIDs(t.val)
		if err != nil {
			continue
		}
		for _, c := range ctids {
			named[chunkID{c, t.xmin}] = tid
			if d, ok := tuples[c]; ok && d.xmin == t.xmin && isDirectory(d.mask) {
				if dcs, err := parseDirectory(d.val, -1); err == nil {
					for _, dc := range dcs {
						named[chunkID{dc, t.xmin}] = tid
					}
				}
			}
		}
	}
	for _, c := range db.vac.debt.list() {
		t, ok := tuples[c.tid]
		if !ok || t.mask&heap.Chunk == 0 || t.xmin != c.xmin {
			continue
		}
		if by, ok := named[c]; ok {
			return fmt.Errorf("chunk %s (xmin %d) in vacuum's debt is named by the version at %s", c.tid, c.xmin, by)
		}
	}
	return nil
}

// TestChunkDebtListedAfterCheckpointRecord: the checkpoint reads vacuum's
// debt for the index file after its record, so the file may carry chunks
// that a first pass listed after it, in a record not yet durable. The WAL
// is flushed before the file is made durable, so a crash after the
// control file cannot keep the file's debt and lose the record: the
// version would be back on the heap after recovery naming chunks the debt
// holds, and the next vacuum free them under it (after an asynchronous
// commit of the overwrite, also lost, under the value the key reads as).
// The pause is a file-system hook at the file's creation, during which
// the value is overwritten and vacuum's first pass removes the old
// version; nothing in that window touches the file system.
func TestChunkDebtListedAfterCheckpointRecord(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprint("asynchronous overwrite ", async), func(t *testing.T) {
			m := vfs.NewMemFS()
			m.MkdirAll("/db")
			m.SyncDir("/")
			db, err := Open("/db", Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: 10 * time.Second,
				SharedBuffers: 4 << 20, Autovacuum: noAutovacuum})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			big := string(patterned(3*chunkSize, 1))
			mustPut(t, db, "big", big)
			if !async {
				mustPut(t, db, "big", "small")
			}
			at, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			m.SetOpHook(func(p vfs.CrashPoint) {
				if p.Op.Path == "/db/"+indexFileTmpName {
					once.Do(func() {
						close(at)
						<-resume
					})
				}
			})
			ckptErr := make(chan error, 1)
			go func() { ckptErr <- db.Checkpoint() }()
			<-at
			if async {
				off := SyncCommitOff
				tx, err := db.Begin(context.Background(), TxnOptions{SynchronousCommit: &off})
				if err == nil {
					err = tx.Put([]byte("big"), []byte("small"))
				}
				if err == nil {
					err = tx.Commit()
				}
				if err != nil {
					close(resume)
					t.Fatal(err)
				}
			}
			// Err is asked before each page of pass 1: canceled before
			// pass 2.
			ctx := &cancelAfter{Context: context.Background()}
			ctx.n.Store(int64(db.pool.NBlocks()))
			st, err := db.Vacuum(ctx)
			debt := db.vac.debt.len()
			close(resume)
			if cerr := <-ckptErr; cerr != nil {
				t.Fatal(cerr)
			}
			m.SetOpHook(nil)
			if !errors.Is(err, context.Canceled) || st.TuplesRemoved != 1 || debt != 3 {
				t.Fatalf("vacuum: %+v, %v, %d chunks owed; want the old version removed, its 3 chunks owed, and then context.Canceled", st, err, debt)
			}
			c := m.CrashCopy(vfs.DropUnsynced, rand.New(rand.NewPCG(1, 2)))
			cdb, err := Open("/db", Options{FS: c, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
			if err != nil {
				t.Fatal(err)
			}
			defer cdb.Close()
			if !cdb.Recovery().IndexFromFile {
				t.Fatalf("the copy rebuilt its index (%q): the test is about the index file's debt", cdb.Recovery().IndexRebuildReason)
			}
			if err := debtChunkNamed(cdb); err != nil {
				t.Fatal(err)
			}
			if _, err := cdb.Vacuum(context.Background()); err != nil {
				t.Fatal(err)
			}
			if v, _ := get(t, cdb, "big"); v != "small" && v != big {
				t.Fatalf("big reads %d bytes after the copy's vacuum", len(v))
			}
			mustVerify(t, cdb)
		})
	}
}

// TestChunkDebtCrashModel: transactions write one or two out-of-line
// values, overwrite or delete their own, delete, or roll back, while vacuum
// runs (stopped at a random page now and then) and checkpoints come, in
// the writer's goroutine or beside it along with Verify and Backup; the
// power fails at file-system operations along the way. Every crash copy
// must open with every acknowledged value whole (the transaction in flight
// all there or not at all), no chunk in vacuum's debt named by a version,
// no orphan chunk, and a vacuum must pay the whole debt and keep every
// value; one copy in four also crashes during its own recovery or vacuum,
// and that copy is held to the same. Every Backup taken opens the same way.
// A crash between the passes of a last run is checked whatever points the
// sample met.
func TestChunkDebtCrashModel(t *testing.T) {
	for _, beside := range []bool{false, true} {
		name := "in the writer's goroutine"
		if beside {
			name = "beside the writer, with Verify and Backup"
		}
		t.Run(name, func(t *testing.T) { chunkDebtCrashModel(t, beside) })
	}
}

func chunkDebtCrashModel(t *testing.T, beside bool) {
	seed := testSeed(t, *ladderSeed)
	sample, iters := *ladderSample, 30
	if sample <= 0 {
		sample = 10
		if raceEnabled {
			sample, iters = 80, 16
		}
	}
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	db, err := Open("/db", Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: 5 * time.Millisecond,
		SharedBuffers: 16 * heap.PageSize, WALSegmentSize: 1 << 20, Autovacuum: noAutovacuum})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := rand.New(rand.NewPCG(seed, 21))
	hr := rand.New(rand.NewPCG(seed, 22))
	model := &debtModel{acked: map[string]string{}}
	var (
		hookMu                                sync.Mutex
		points, checked, owed, twice, backups int
		failure                               error
	)
	m.SetOpHook(func(p vfs.CrashPoint) {
		hookMu.Lock()
		defer hookMu.Unlock()
		points++
		if failure != nil || hr.IntN(sample) != 0 {
			return
		}
		if db.vac.debt.len() > 0 {
			owed++
		}
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast} {
			checked++
			c := p.CrashCopy(mode, rand.New(rand.NewPCG(seed, uint64(p.Op.Index))))
			var again *vfs.MemFS
			if hr.IntN(4) == 0 {
				k, n := hr.IntN(80)+1, 0
				c.SetOpHook(func(q vfs.CrashPoint) {
					if n++; n == k {
						again = q.CrashCopy(vfs.DropUnsynced, rand.New(rand.NewPCG(seed, uint64(q.Op.Index))))
					}
				})
			}
			if err := checkDebtModel(c, "/db", model); err != nil {
				failure = fmt.Errorf("crash after op %v (%v): %w", p.Op, mode, err)
				return
			}
			if again != nil {
				twice++
				if err := checkDebtModel(again, "/db", model); err != nil {
					failure = fmt.Errorf("crash after op %v (%v), then during the copy's recovery or vacuum: %w", p.Op, mode, err)
					return
				}
			}
		}
	})
	ctx := context.Background()
	stop := make(chan struct{})
	var bg sync.WaitGroup
	var backupDirs []string
	if beside {
		loop := func(name string, fn func(*rand.Rand) error) {
			bg.Add(1)
			go func() {
				defer bg.Done()
				br := rand.New(rand.NewPCG(seed, uint64(len(name))))
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := fn(br); err != nil && !errors.Is(err, context.Canceled) {
						t.Errorf("%s: %v", name, err)
						return
					}
				}
			}()
		}
		loop("checkpoint", func(*rand.Rand) error { return db.Checkpoint() })
		loop("vacuum", func(br *rand.Rand) error {
			c := &cancelAfter{Context: ctx}
			c.n.Store(int64(br.IntN(40) + 1))
			if br.IntN(3) == 0 {
				c.n.Store(1 << 30)
			}
			_, err := db.Vacuum(c)
			return err
		})
		loop("verify", func(*rand.Rand) error {
			rep, err := db.Verify()
			if err == nil && (!rep.OK() || rep.OrphanChunks != 0) {
				err = fmt.Errorf("%d orphan chunks:\n%s", rep.OrphanChunks, rep)
			}
			return err
		})
		loop("backup", func(*rand.Rand) error {
			if len(backupDirs) == 2 {
				<-stop
				return nil
			}
			dir := fmt.Sprintf("/backup%d", len(backupDirs))
			if _, err := db.Backup(ctx, dir); err != nil {
				return err
			}
			backupDirs = append(backupDirs, dir)
			return nil
		})
	}
	value := func(i int) string {
		if r.IntN(5) == 0 {
			return string(patterned(100, uint32(i)))
		}
		return string(patterned(2*chunkSize+r.IntN(3*chunkSize), uint32(i)))
	}
	for i := 0; i < iters; i++ {
		hookMu.Lock()
		failed := failure != nil
		hookMu.Unlock()
		if failed {
			break
		}
		if !beside {
			switch r.IntN(8) {
			case 0:
				if err := db.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			case 1, 2:
				c := &cancelAfter{Context: ctx}
				c.n.Store(int64(r.IntN(30) + 1))
				if r.IntN(2) == 0 {
					c.n.Store(1 << 30)
				}
				if _, err := db.Vacuum(c); err != nil && !errors.Is(err, context.Canceled) {
					t.Fatal(err)
				}
			}
			if err := debtChunkNamed(db); err != nil {
				t.Fatalf("transaction %d: %v", i, err)
			}
		}
		k1, k2 := fmt.Sprintf("big%d", r.IntN(4)), fmt.Sprintf("big%d", r.IntN(4))
		writes := map[string]*string{}
		var ops []func(*Txn) error
		put := func(k, v string) {
			writes[k] = &v
			ops = append(ops, func(tx *Txn) error { return tx.Put([]byte(k), []byte(v)) })
		}
		del := func(k string) {
			writes[k] = nil
			ops = append(ops, func(tx *Txn) error { return tx.Delete([]byte(k)) })
		}
		switch r.IntN(5) {
		case 0:
			put(k1, value(i))
		case 1: // two values, both out of line most often
			put(k1, value(i))
			put(k2, value(i+1000))
		case 2: // its own value overwritten
			put(k1, value(i))
			put(k1, value(i+2000))
		case 3: // its own value deleted
			put(k1, value(i))
			del(k1)
		case 4:
			del(k1)
		}
		rollback := r.IntN(8) == 0
		model.mu.Lock()
		if !rollback {
			model.pending = writes
		}
		model.mu.Unlock()
		err := db.Update(ctx, func(tx *Txn) error {
			for _, op := range ops {
				if err := op(tx); err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
			}
			if rollback {
				return errRollBack
			}
			return nil
		})
		if err != nil && !errors.Is(err, errRollBack) {
			t.Fatal(err)
		}
		model.mu.Lock()
		if !rollback {
			for k, v := range writes {
				if v == nil {
					delete(model.acked, k)
				} else {
					model.acked[k] = *v
				}
			}
		}
		model.pending = nil
		model.mu.Unlock()
	}
	close(stop)
	bg.Wait()
	m.SetOpHook(nil)
	if failure != nil {
		t.Fatalf("seed %d (-crash.seed reproduces it): %v", seed, failure)
	}
	// Which operations the sample meets depends on the goroutines'
	// timing: one crash between a run's passes is checked whatever it
	// met. Err is asked before each page of pass 1, then before the
	// first revisit.
	for _, v := range []string{string(patterned(3*chunkSize, 99)), "small"} {
		mustPut(t, db, "big0", v)
		model.mu.Lock()
		model.acked["big0"] = v
		model.mu.Unlock()
	}
	between := &hookCtx{Context: ctx, n: int64(db.pool.NBlocks()) + 1, fn: func() {
		if db.vac.debt.len() == 0 {
			t.Errorf("vacuum owes nothing between its passes")
		}
		owed++
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast} {
			checked++
			if err := checkDebtModel(m.CrashCopy(mode, rand.New(rand.NewPCG(seed, 1))), "/db", model); err != nil {
				t.Errorf("seed %d: crash between a vacuum's passes (%v): %v", seed, mode, err)
			}
		}
	}}
	if _, err := db.Vacuum(between); err != nil {
		t.Fatal(err)
	}
	mustHaveRun(t, between)
	for _, dir := range backupDirs {
		// The model of the writer's last acknowledged values does not
		// hold for a backup, which is of a moment before: it is held to
		// the rest.
		if err := checkDebtModel(m, dir, nil); err != nil {
			t.Errorf("backup %s: %v", dir, err)
		}
		backups++
	}
	t.Logf("seed %d: %d operations, %d crash copies checked (%d while vacuum owed chunks, %d crashed again), %d backups", seed, points, checked, owed, twice, backups)
}

// checkDebtModel opens the database in dir on fsys and checks it against
// model (nil: no model), before its vacuum and after: no chunk in the debt
// named by a version, no orphan chunk, and the debt paid by the vacuum.
func checkDebtModel(fsys *vfs.MemFS, dir string, model *debtModel) error {
	return checkDebtCopy(fsys, dir, func(db *DB) error {
		if model != nil {
			if err := model.check(db); err != nil {
				return err
			}
		}
		return debtChunkNamed(db)
	})
}

// checkDebtCopy opens the database in dir on fsys and checks it before its
// vacuum and after: extra, if not nil, then Verify with no problem and no
// orphan chunk; and that the vacuum paid the whole debt.
func checkDebtCopy(fsys *vfs.MemFS, dir string, extra func(*DB) error) error {
	// A small pool: each Open of a copy would otherwise allocate and
	// clear the default 128 MiB, most of the check's time.
	db, err := Open(dir, Options{FS: fsys, SharedBuffers: 2 << 20, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer db.Close()
	check := func(when string) error {
		if extra != nil {
			if err := extra(db); err != nil {
				return fmt.Errorf("%s: %w", when, err)
			}
		}
		rep, err := db.Verify()
		if err != nil {
			return fmt.Errorf("verify %s: %w", when, err)
		}
		if !rep.OK() || rep.OrphanChunks != 0 {
			return fmt.Errorf("verify %s (index from file %v): %d orphan chunks:\n%s", when, db.Recovery().IndexFromFile, rep.OrphanChunks, rep)
		}
		return nil
	}
	if err := check("after recovery"); err != nil {
		return err
	}
	if _, err := db.Vacuum(context.Background()); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	if n := db.vac.debt.len(); n != 0 {
		return fmt.Errorf("vacuum after recovery left %d chunks in its debt: %v", n, db.vac.debt.list())
	}
	return check("after vacuum")
}
