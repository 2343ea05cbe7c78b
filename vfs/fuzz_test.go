package vfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"
)

// FuzzMemFS runs the operations the input spells out (creates, writes at any
// offset, truncations to any size, syncs, renames, removes, directory syncs
// and crash copies) on a MemFS and on a model of the current contents. It
// must never panic; every file must read as the model says; a write or
// truncation past MaxMemFileSize must fail with EFBIG and change nothing;
// and once every file and the directory are synced, a crash copy in every
// mode must equal the current state.
func FuzzMemFS(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 3, 0, 0, 0, 0, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o', 3, 0, 7})
	f.Add([]byte{0, 1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 3, 'a', 'b', 'c', 2, 1, 0, 0, 0, 0, 0, 0, 0, 0x40})
	f.Add([]byte{0, 2, 1, 2, 0, 0x10, 0, 0, 0, 0, 0, 0, 0x80, 4, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 5, 0, 1, 6, 1, 7})
	names := []string{"/a", "/b", "/c", "/d"}
	f.Fuzz(func(t *testing.T, in []byte) {
		m := NewMemFS()
		model := map[string][]byte{}
		open := map[string]File{}
		next := func(n int) []byte {
			if len(in) < n {
				in = append(in, make([]byte, n-len(in))...)
			}
			b := in[:n]
			in = in[n:]
			return b
		}
		// off reads an offset: mostly small, but any int64 the input spells.
		off := func() int64 {
			v := int64(binary.LittleEndian.Uint64(next(8)))
			if v >= 0 && v < 1<<20 {
				return v % 20000
			}
			return v
		}
		for steps := 0; len(in) > 0 && steps < 64; steps++ {
			op, name := next(1)[0]%8, names[int(next(1)[0])%len(names)]
			file := open[name]
			switch op {
			case 0: // create
				g, err := m.Create(name)
				if err != nil {
					t.Fatalf("create %s: %v", name, err)
				}
				if file != nil {
					file.Close()
				}
				open[name], model[name] = g, []byte{}
			case 1: // write
				o, p := off(), next(int(next(1)[0]))
				if file == nil {
					continue
				}
				n, err := file.WriteAt(p, o)
				switch {
				case o < 0: // even an empty write, as pwrite(2)
					if !errors.Is(err, syscall.EINVAL) {
						t.Fatalf("write at %d: %v, want EINVAL", o, err)
					}
				case len(p) == 0:
					if n != 0 || err != nil {
						t.Fatalf("empty write at %d: %d, %v", o, n, err)
					}
				case o > MaxMemFileSize-int64(len(p)):
					if n != 0 || !errors.Is(err, syscall.EFBIG) {
						t.Fatalf("write of %d at %d: %d, %v; want 0, EFBIG", len(p), o, n, err)
					}
				case err != nil || n != len(p):
					t.Fatalf("write of %d at %d: %d, %v", len(p), o, n, err)
				case o+int64(len(p)) > 1<<21:
					// Past what the model keeps in memory: stop here.
					return
				default:
					b := model[name]
					if end := int(o) + len(p); end > len(b) {
						b = append(b, make([]byte, end-len(b))...)
					}
					copy(b[o:], p)
					model[name] = b
				}
			case 2: // truncate
				size := off()
				if file == nil {
					continue
				}
				err := file.Truncate(size)
				switch {
				case size < 0:
					if !errors.Is(err, syscall.EINVAL) {
						t.Fatalf("truncate to %d: %v, want EINVAL", size, err)
					}
				case size > MaxMemFileSize:
					if !errors.Is(err, syscall.EFBIG) {
						t.Fatalf("truncate to %d: %v, want EFBIG", size, err)
					}
				case err != nil:
					t.Fatalf("truncate to %d: %v", size, err)
				case size > 1<<21:
					return
				default:
					b := model[name]
					if int(size) <= len(b) {
						b = b[:size]
					} else {
						b = append(b, make([]byte, int(size)-len(b))...)
					}
					model[name] = b
				}
			case 3: // sync
				if file != nil {
					if err := file.Sync(); err != nil {
						t.Fatal(err)
					}
				}
			case 4: // rename onto another name
				to := names[int(next(1)[0])%len(names)]
				if _, ok := model[name]; !ok || to == name {
					continue
				}
				if err := m.Rename(name, to); err != nil {
					t.Fatalf("rename %s %s: %v", name, to, err)
				}
				if old := open[to]; old != nil {
					old.Close()
				}
				model[to], open[to] = model[name], open[name]
				delete(model, name)
				delete(open, name)
			case 5: // remove
				if _, ok := model[name]; !ok {
					continue
				}
				if err := m.Remove(name); err != nil {
					t.Fatalf("remove %s: %v", name, err)
				}
				if file != nil {
					file.Close()
				}
				delete(model, name)
				delete(open, name)
			case 6: // syncdir
				if err := m.SyncDir("/"); err != nil {
					t.Fatal(err)
				}
			case 7: // crash copies of a clone equal the original's
				seed := uint64(next(1)[0])
				for _, mode := range []CrashMode{DropUnsynced, KeepRandom, TearLast} {
					a := m.CrashCopy(mode, rand.New(rand.NewPCG(seed, 1)))
					b := m.Clone().CrashCopy(mode, rand.New(rand.NewPCG(seed, 1)))
					for _, n := range names {
						x, errx := readFile(a, n)
						y, erry := readFile(b, n)
						if !bytes.Equal(x, y) || (errx == nil) != (erry == nil) {
							t.Fatalf("%v crash copy of %s: %q (%v) from the MemFS, %q (%v) from its clone", mode, n, x, errx, y, erry)
						}
					}
				}
			}
		}
		for _, n := range names {
			got, err := readFile(m, n)
			want, ok := model[n]
			if !ok {
				if err == nil {
					t.Fatalf("%s exists, the model has no such file", n)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s reads %d bytes (%v), the model %d", n, len(got), err, len(want))
			}
		}
		// Everything synced: every crash mode keeps the current state.
		for _, g := range open {
			if err := g.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.SyncDir("/"); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []CrashMode{DropUnsynced, KeepRandom, TearLast} {
			c := m.CrashCopy(mode, nil)
			for _, n := range names {
				got, err := readFile(c, n)
				want, ok := model[n]
				if ok != (err == nil) || !bytes.Equal(got, want) {
					t.Fatalf("%v crash copy after syncing everything: %s reads %d bytes (%v), want %d (exists %v)", mode, n, len(got), err, len(want), ok)
				}
			}
		}
	})
}
