package engine

import (
	"reflect"
	"testing"
)

// fillStats sets every uint64 counter in v, nested groups and histograms
// included, to n, and every histogram's Nanos flag.
func fillStats(v reflect.Value, n uint64) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillStats(v.Field(i), n)
		}
	case reflect.Array:
		for i := range v.Len() {
			fillStats(v.Index(i), n)
		}
	case reflect.Uint64:
		v.SetUint(n)
	case reflect.Bool:
		v.SetBool(true)
	}
}

// Sub must subtract every counter of every group (a field added to a group
// and forgotten in its Sub reads as 0 here) and keep the gauges.
func TestStatsSubCoversEveryField(t *testing.T) {
	var a, b Stats
	fillStats(reflect.ValueOf(&a).Elem(), 5)
	fillStats(reflect.ValueOf(&b).Elem(), 2)
	d := a.Sub(b)
	gauges := map[string]bool{"Heap.Blocks": true, "Txn.LockWaiters": true, "Index.Keys": true, "Checkpoint.CommitsAtRedo": true, "Vacuum.ChunksOwed": true, "Vacuum.DeadTuples": true}
	var check func(path string, v reflect.Value)
	check = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				name := v.Type().Field(i).Name
				if path != "" {
					name = path + "." + name
				}
				check(name, v.Field(i))
			}
		case reflect.Array:
			for i := range v.Len() {
				check(path, v.Index(i))
			}
		case reflect.Uint64:
			want := uint64(3)
			if gauges[path] {
				want = 5
			}
			if v.Uint() != want {
				t.Errorf("Sub: %s = %d, want %d", path, v.Uint(), want)
			}
		}
	}
	check("", reflect.ValueOf(d))
}
