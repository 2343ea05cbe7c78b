package verify

import (
	"fmt"
	"path/filepath"
	"strings"

	"mvkv/clog"
)

// clogFindings groups, per CLOG page, what Verify finds about tuple xids
// whose status comes from that page: a damaged page (a flipped byte fails
// its checksum; a lost one contradicts hints) holds 32704 statuses, and a
// line per tuple would bury everything else. Each page gets one line with
// its file and offset, how many tuple xids it affects and the first
// finding in full.
type clogFindings struct {
	dir   string
	pages map[clogPageKey]*clogPageFinding
	order []clogPageKey
}

type clogPageKey struct {
	file string
	off  int64 // of the page in the file
}

type clogPageFinding struct {
	first          string
	n              int
	minXid, maxXid uint64
	kinds          map[string]int
	kindOrder      []string
}

func newCLOGFindings(dir string) *clogFindings {
	return &clogFindings{dir: dir, pages: map[clogPageKey]*clogPageFinding{}}
}

// add records a finding about xid (kind is a short name for the count,
// finding the full text).
func (f *clogFindings) add(xid uint64, kind, finding string) {
	name, off := clog.XidFile(xid)
	k := clogPageKey{name, off - off%clog.PageSize}
	p := f.pages[k]
	if p == nil {
		p = &clogPageFinding{first: finding, minXid: xid, maxXid: xid, kinds: map[string]int{}}
		f.pages[k] = p
		f.order = append(f.order, k)
	}
	p.n++
	p.minXid, p.maxXid = min(p.minXid, xid), max(p.maxXid, xid)
	if p.kinds[kind]++; p.kinds[kind] == 1 {
		p.kindOrder = append(p.kindOrder, kind)
	}
}

// report adds one problem per CLOG page, in the order first seen.
func (f *clogFindings) report(problem Problemf) {
	for _, k := range f.order {
		p := f.pages[k]
		if p.n == 1 {
			problem("%s", p.first)
			continue
		}
		var kinds []string
		for _, kind := range p.kindOrder {
			kinds = append(kinds, fmt.Sprintf("%d %s", p.kinds[kind], kind))
		}
		problem("CLOG page %s at offset %d: %d findings (xids from %d to %d): %s; the first: %s",
			filepath.Join(f.dir, k.file), k.off, p.n, p.minXid, p.maxXid, strings.Join(kinds, ", "), p.first)
	}
}
