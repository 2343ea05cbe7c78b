package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"

	"mvkv/internal/heap"
)

// syntheticIndexFile encodes an index file of n pgbench-like keys.
func syntheticIndexFile(n int) []byte {
	var body []byte
	prev := ""
	for i := range n {
		k := fmt.Sprintf("a:%010d", i)
		shared := 0
		for shared < len(prev) && prev[shared] == k[shared] {
			shared++
		}
		body = binary.AppendUvarint(body, uint64(shared))
		body = binary.AppendUvarint(body, uint64(len(k)-shared))
		body = append(body, k[shared:]...)
		body = appendTID(body, heap.TID{Block: uint32(i / 60), Slot: uint16(i % 60)})
		prev = k
	}
	head := indexFileHeader{keys: uint64(n)}.encode()
	sum := crc32.Update(crc32.Checksum(body, castagnoli), castagnoli, head)
	out := append(head, body...)
	return binary.LittleEndian.AppendUint32(out, sum)
}

// BenchmarkLoadIndexFile decodes an index file of a million keys into an
// empty index: the work Open does after a clean shutdown.
func BenchmarkLoadIndexFile(b *testing.B) {
	const n = 1_000_000
	file := syntheticIndexFile(n)
	b.SetBytes(int64(len(file)))
	b.ResetTimer()
	for range b.N {
		ix := newIndex()
		if _, err := decodeIndexFile(bytes.NewReader(file), int64(len(file)), "index", ix, 1<<30, nil); err != nil {
			b.Fatal(err)
		}
		if ix.len() != n {
			b.Fatalf("%d keys", ix.len())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
}
