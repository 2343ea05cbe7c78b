package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus series, on its own registry.
type metrics struct {
	reg      *prometheus.Registry
	commands *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	clients  prometheus.Gauge
	// per-command children, resolved once so the hot path does no map
	// lookups by label
	byCmd map[*command]cmdMetrics
	other cmdMetrics
}

type cmdMetrics struct {
	count prometheus.Counter
	lat   prometheus.Observer
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.commands = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mvkv_commands_total", Help: "Commands processed, by command name (unknown commands as \"unknown\").",
	}, []string{"command"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mvkv_command_duration_seconds",
		Help:    "Time from a command's arrival to its reply being ready (before the write to the socket), by command; for a pipelined write, up to its commit record's insertion (its wait for the flush, shared with the rest of its pipeline, comes before the replies are written).",
		Buckets: prometheus.ExponentialBuckets(10e-6, 2.5, 14),
	}, []string{"command"})
	m.clients = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mvkv_connected_clients", Help: "Client connections being served."})
	m.reg.MustRegister(m.commands, m.latency, m.clients, engineCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.byCmd = map[*command]cmdMetrics{}
	for name, c := range commandTable {
		m.byCmd[c] = cmdMetrics{m.commands.WithLabelValues(name), m.latency.WithLabelValues(name)}
	}
	m.other = cmdMetrics{m.commands.WithLabelValues("unknown"), m.latency.WithLabelValues("unknown")}
	return m
}

func (m *metrics) observe(c *command, took time.Duration) {
	cm, ok := m.byCmd[c]
	if !ok {
		cm = m.other
	}
	cm.count.Inc()
	cm.lat.Observe(took.Seconds())
}

func (m *metrics) connected()    { m.clients.Inc() }
func (m *metrics) disconnected() { m.clients.Dec() }

// engineCollector reads the engine's and the server's counters at scrape
// time.
type engineCollector struct{ s *Server }

type metricDesc struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	val  func(e engineCollector) float64
}

var engineMetrics = func() []metricDesc {
	d := func(name, help string, kind prometheus.ValueType, val func(e engineCollector) float64) metricDesc {
		return metricDesc{prometheus.NewDesc(name, help, nil, nil), kind, val}
	}
	c, g := prometheus.CounterValue, prometheus.GaugeValue
	return []metricDesc{
		d("mvkv_commits_total", "Transactions committed.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Txn.Commits) }),
		d("mvkv_aborts_total", "Transactions rolled back.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Txn.Aborts) }),
		d("mvkv_deadlocks_total", "Row lock waits refused as deadlocks.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Txn.Deadlocks) }),
		d("mvkv_lock_waits_total", "Sleeps for a row lock another transaction held (contention on hot keys).", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Txn.LockWaits) }),
		d("mvkv_lock_waiters", "Transactions waiting for a row lock now.", g, func(e engineCollector) float64 { return float64(e.s.db.Stats().Txn.LockWaiters) }),
		d("mvkv_wal_records_total", "WAL records inserted.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().WAL.Records) }),
		d("mvkv_wal_bytes_total", "WAL bytes inserted.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().WAL.Bytes) }),
		d("mvkv_wal_writes_total", "WAL writes to the segment files.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().WAL.Writes) }),
		d("mvkv_wal_syncs_total", "WAL fsyncs.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().WAL.Syncs) }),
		d("mvkv_wal_sync_seconds_total", "Time spent in WAL fsyncs; divide by mvkv_wal_syncs_total for the mean sync latency.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().WAL.SyncNanos) / 1e9 }),
		d("mvkv_wal_flush_requests_total", "Requests to make the WAL durable up to a point (commits waiting, page writes).", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().WAL.FlushRequests) }),
		d("mvkv_commits_per_sync", "Commits per WAL fsync since the database was opened (group commit).", g, func(e engineCollector) float64 {
			st := e.s.db.Stats()
			if st.WAL.Syncs == 0 {
				return 0
			}
			return float64(st.Txn.Commits) / float64(st.WAL.Syncs)
		}),
		d("mvkv_clog_lookups_total", "CLOG status lookups.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().CLOG.Lookups) }),
		d("mvkv_clog_hits_total", "CLOG lookups answered from the SLRU buffers.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().CLOG.Hits) }),
		d("mvkv_clog_misses_total", "CLOG lookups that loaded a page.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().CLOG.Misses) }),
		d("mvkv_clog_page_reads_total", "CLOG pages read.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().CLOG.PageReads) }),
		d("mvkv_clog_page_writes_total", "CLOG pages written.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().CLOG.PageWrites) }),
		d("mvkv_buffer_hits_total", "Heap buffer pool hits.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Buffers.Hits) }),
		d("mvkv_buffer_misses_total", "Heap buffer pool misses.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Buffers.Misses) }),
		d("mvkv_hint_bits_set_total", "Hint bits written by readers.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Heap.HintBitsSet) }),
		d("mvkv_prunes_by_update_total", "Heap pages pruned by a writer that found the page full.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Heap.PrunesByUpdate) }),
		d("mvkv_pruned_by_update_versions_total", "Dead versions freed by writers' prunes.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Heap.PrunedByUpdate) }),
		d("mvkv_prunes_by_read_total", "Heap pages pruned by a reader that visited a full page with dead versions.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Heap.PrunesByRead) }),
		d("mvkv_pruned_by_read_versions_total", "Dead versions freed by readers' prunes.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Heap.PrunedByRead) }),
		d("mvkv_pruned_by_update_chunks_total", "Out-of-line value chunks of aborted writes freed by writers' prunes.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Heap.ChunksPrunedByUpdate) }),
		d("mvkv_pruned_by_read_chunks_total", "Out-of-line value chunks of aborted writes freed by readers' prunes.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Heap.ChunksPrunedByRead) }),
		d("mvkv_vm_bits_set_total", "Visibility map bits set by vacuum.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().VisibilityMap.BitsSet) }),
		d("mvkv_vm_bits_cleared_total", "Visibility map bits cleared by heap changes.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().VisibilityMap.BitsCleared) }),
		d("mvkv_index_only_visible_total", "Index-only lookups answered from the visibility map.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Index.AllVisible) }),
		d("mvkv_index_only_heap_fetches_total", "Index-only lookups that read the heap.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Index.HeapFetches) }),
		d("mvkv_vacuum_runs_total", "Vacuum runs, manual and autovacuum.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.Runs) }),
		d("mvkv_autovacuum_runs_total", "Vacuum runs started by autovacuum.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.AutovacuumRuns) }),
		d("mvkv_autovacuum_failures_total", "Autovacuum runs that ended in an error.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.AutovacuumFailures) }),
		d("mvkv_vacuum_pages_pruned_total", "Heap pages vacuum's first pass changed (freed, froze or compacted).", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.PagesPruned) }),
		d("mvkv_vacuum_pages_read_total", "Heap pages vacuum read from disk through its buffer ring.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.PagesRead) }),
		d("mvkv_vacuum_ring_buffers_swept_total", "Buffer frames vacuum's ring took from the pool's clock sweep (each may evict a page).", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.RingSwept) }),
		d("mvkv_vacuum_pages_truncated_total", "Empty heap pages vacuum cut off the end of the heap files.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.PagesTruncated) }),
		d("mvkv_vacuum_tuples_removed_total", "Tuple versions removed by vacuum.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.TuplesRemoved) }),
		d("mvkv_vacuum_chunks_removed_total", "Out-of-line value chunks freed by vacuum.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.ChunksRemoved) }),
		d("mvkv_vacuum_chunks_owed", "Out-of-line value chunks no version names that vacuum has yet to free.", g, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.ChunksOwed) }),
		d("mvkv_vacuum_dead_tuples", "Dead tuple versions autovacuum counts against its threshold (n_dead_tup, an estimate).", g, func(e engineCollector) float64 { return float64(e.s.db.Stats().Vacuum.DeadTuples) }),
		d("mvkv_checkpoints_total", "Checkpoints completed.", c, func(e engineCollector) float64 { return float64(e.s.db.Stats().Checkpoint.Count) }),
		d("mvkv_server_open_transactions", "Engine transactions begun by the server and not yet ended.", g, func(e engineCollector) float64 { return float64(e.s.openTxns.Load()) }),
		d("mvkv_server_connections_received_total", "Connections accepted.", c, func(e engineCollector) float64 { return float64(e.s.connsRecv.Load()) }),
		d("mvkv_server_cross_protocol_closes_total", "Connections closed for sending POST or Host: as a command, as an HTTP request does (possible cross-protocol scripting).", c, func(e engineCollector) float64 { return float64(e.s.crossProto.Load()) }),
		d("mvkv_server_rejected_connections_total", "Connections refused by maxclients.", c, func(e engineCollector) float64 { return float64(e.s.rejected.Load()) }),
	}
}()

func (e engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range engineMetrics {
		ch <- m.desc
	}
}

func (e engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range engineMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.val(e))
	}
}
