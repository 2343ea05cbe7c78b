package server

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/redcon"
)

// Server and connection control commands: TIME, LASTSAVE, SAVE, BGSAVE,
// BACKUP, WAIT, MONITOR, and CLIENT KILL, REPLY, PAUSE, UNPAUSE, NO-EVICT,
// NO-TOUCH, as Redis 7 answers them.

func cmdTime(x *execCtx, _ [][]byte) error {
	now := time.Now()
	x.out = redcon.AppendArray(x.out, 2)
	x.out = redcon.AppendBulkString(x.out, strconv.FormatInt(now.Unix(), 10))
	x.out = redcon.AppendBulkString(x.out, strconv.Itoa(now.Nanosecond()/1000))
	return nil
}

// cmdLastSave answers when the last checkpoint completed: what a save is
// here (see SAVE).
// cmdRole is ROLE: a master with no replicas, at the replication offset
// INFO replication shows (the WAL's length), as Sentinel-aware clients ask.
func cmdRole(x *execCtx, _ [][]byte) error {
	x.out = redcon.AppendArray(x.out, 3)
	x.out = redcon.AppendBulkString(x.out, "master")
	x.out = redcon.AppendInt(x.out, int64(x.c.s.db.Stats().WAL.Bytes))
	x.out = redcon.AppendArray(x.out, 0)
	return nil
}

func cmdLastSave(x *execCtx, _ [][]byte) error {
	x.out = redcon.AppendInt(x.out, x.c.s.db.LastCheckpoint().Unix())
	return nil
}

// cmdSave is SAVE: a checkpoint, which writes every dirty page and lets
// recovery start from it, as close to Redis's snapshot as a WAL engine
// has. Every acknowledged write is durable already (in the WAL), so a
// save adds no durability, only a shorter recovery.
func cmdSave(x *execCtx, _ [][]byte) error {
	if x.c.s.bgsave.Load() {
		x.errorf("ERR Background save already in progress")
		return nil
	}
	return cmdCheckpoint(x, nil)
}

// cmdBgSave is BGSAVE [SCHEDULE]: a checkpoint on a goroutine of its own.
func cmdBgSave(x *execCtx, args [][]byte) error {
	schedule := false
	if len(args) > 1 {
		if len(args) > 2 || !strings.EqualFold(string(args[1]), "schedule") {
			x.syntaxError()
			return nil
		}
		schedule = true
	}
	s := x.c.s
	if !s.bgsave.CompareAndSwap(false, true) {
		if schedule {
			x.out = append(x.out, "+Background saving scheduled\r\n"...)
			return nil
		}
		x.errorf("ERR Background save already in progress")
		return nil
	}
	go s.backgroundCheckpoint("BGSAVE")
	x.out = append(x.out, "+Background saving started\r\n"...)
	return nil
}

// backgroundCheckpoint runs the checkpoint of BGSAVE or BGREWRITEAOF
// (what), which set s.bgsave, and clears it at the end; INFO's
// rdb_last_bgsave_status tells how the last one ended.
func (s *Server) backgroundCheckpoint(what string) {
	defer s.bgsave.Store(false)
	err := s.db.Checkpoint()
	s.saveFailed.Store(err != nil)
	if err != nil {
		s.log.Warn(what+" checkpoint failed", "err", err)
	}
}

// cmdWait is WAIT numreplicas timeout. There are no replicas, so it
// answers 0: at once when no replica is asked for (or inside EXEC, as
// Redis), else after the timeout as Redis would (0 waits until shutdown).
func cmdWait(x *execCtx, args [][]byte) error {
	n, ok := parseInt(args[1])
	if !ok {
		x.notInteger()
		return nil
	}
	t, ok := parseInt(args[2])
	if !ok {
		x.errorf("ERR timeout is not an integer or out of range")
		return nil
	}
	if t < 0 {
		x.errorf("ERR timeout is negative")
		return nil
	}
	if n > 0 && !x.inExec {
		c := x.c
		c.out = x.out
		c.flush()
		x.out = c.out
		var wait <-chan time.Time
		if t > 0 {
			tm := time.NewTimer(time.Duration(t) * time.Millisecond)
			defer tm.Stop()
			wait = tm.C
		}
		// Blocked as Redis's BLOCKED_WAIT: CLIENT LIST and INFO show it,
		// CLIENT UNBLOCK ends it, and so does a shutdown (which waits
		// for this connection, so the wait must not wait for it).
		unblock := make(chan string, 1)
		c.mu.Lock()
		c.unblock = unblock
		c.mu.Unlock()
		c.s.blocked.Add(1)
		w := c.watchClose()
		var reason string
		gone := false
		select {
		case <-wait:
		case <-c.ctx.Done():
		case <-c.s.closingC:
		case reason = <-unblock:
		case <-w.gone:
			gone = true
		}
		w.stop()
		c.mu.Lock()
		c.unblock = nil
		c.mu.Unlock()
		c.s.blocked.Add(-1)
		if gone {
			// Nobody to answer.
			c.quit = true
			return nil
		}
		if reason == "error" {
			x.errorf("UNBLOCKED client unblocked via CLIENT UNBLOCK")
			return nil
		}
	}
	x.out = redcon.AppendInt(x.out, 0)
	return nil
}

// Monitors.

// monitorQueue bounds the lines waiting for one monitor; a monitor that
// falls this far behind is disconnected, as Redis disconnects a client
// past its output buffer limit.
const monitorQueue = 4096

type monitorSet struct {
	mu sync.RWMutex
	m  map[*conn]chan []byte // guarded by mu
}

// cmdMonitor makes the connection a monitor: from now on every command
// other clients run is written to it, as Redis's MONITOR.
func cmdMonitor(x *execCtx, _ [][]byte) error {
	c := x.c
	if x.inExec {
		x.errorf("ERR MONITOR isn't allowed for DENY BLOCKING client")
		return nil
	}
	s := c.s
	s.monitors.mu.Lock()
	defer s.monitors.mu.Unlock()
	if _, ok := s.monitors.m[c]; ok {
		return nil // as Redis: no reply when already monitoring
	}
	ch := make(chan []byte, monitorQueue)
	if s.monitors.m == nil {
		s.monitors.m = map[*conn]chan []byte{}
	}
	s.monitors.m[c] = ch
	s.monitorsN.Add(1)
	x.ok()
	go func() {
		for line := range ch {
			c.wmu.Lock()
			n, err := c.nc.Write(line)
			c.wmu.Unlock()
			c.s.netOut.Add(uint64(n))
			if err != nil {
				c.nc.Close()
			}
		}
	}()
	return nil
}

// stopMonitor ends c's monitoring when it disconnects.
func (s *Server) stopMonitor(c *conn) {
	if s.monitorsN.Load() == 0 {
		return
	}
	s.monitors.mu.Lock()
	if ch, ok := s.monitors.m[c]; ok {
		delete(s.monitors.m, c)
		s.monitorsN.Add(-1)
		close(ch)
	}
	s.monitors.mu.Unlock()
}

// feedMonitors sends one command to every monitor in Redis's format:
// +<unix time with microseconds> [0 <client address>] "arg" ... Admin
// commands are not sent, and AUTH's and HELLO's passwords are redacted,
// as Redis does.
func (c *conn) feedMonitors(cmd *command, args [][]byte) {
	s := c.s
	if s.monitorsN.Load() == 0 || cmd == nil {
		return
	}
	meta := redisMeta[cmd.name]
	if len(args) > 1 {
		if m, ok := redisMeta[cmd.name+"|"+lower(args[1])]; ok {
			meta = m
		}
	}
	for _, f := range meta.flags {
		if f == "admin" {
			return
		}
	}
	now := time.Now()
	line := []byte{'+'}
	line = strconv.AppendInt(line, now.Unix(), 10)
	line = append(line, '.')
	us := strconv.Itoa(now.Nanosecond() / 1000)
	line = append(line, "000000"[len(us):]...)
	line = append(line, us...)
	line = append(line, " [0 "...)
	line = append(line, c.nc.RemoteAddr().String()...)
	line = append(line, ']')
	redact := -1
	switch cmd.name {
	case "auth":
		redact = 1
	case "hello":
		for i, a := range args {
			if strings.EqualFold(string(a), "auth") {
				redact = i + 1
				break
			}
		}
	}
	for i, a := range args {
		line = append(line, ' ')
		if redact >= 0 && i >= redact {
			line = append(line, `"(redacted)"`...)
			continue
		}
		line = appendRepr(line, a)
	}
	line = append(line, "\r\n"...)
	s.monitors.mu.RLock()
	for m, ch := range s.monitors.m {
		if m == c {
			continue
		}
		select {
		case ch <- line:
		default:
			m.nc.Close()
		}
	}
	s.monitors.mu.RUnlock()
}

// appendRepr appends b quoted as Redis's sdscatrepr.
func appendRepr(out, b []byte) []byte {
	out = append(out, '"')
	for _, ch := range b {
		switch ch {
		case '\\', '"':
			out = append(out, '\\', ch)
		case '\n':
			out = append(out, `\n`...)
		case '\r':
			out = append(out, `\r`...)
		case '\t':
			out = append(out, `\t`...)
		case '\a':
			out = append(out, `\a`...)
		case '\b':
			out = append(out, `\b`...)
		default:
			if ch >= 0x20 && ch < 0x7f {
				out = append(out, ch)
			} else {
				out = append(out, '\\', 'x', "0123456789abcdef"[ch>>4], "0123456789abcdef"[ch&15])
			}
		}
	}
	return append(out, '"')
}

// Client pause.

// pauseState is CLIENT PAUSE's: until when, and whether all commands or
// only writes wait. changed is closed whenever the state changes, waking
// the waiters to look again.
type pauseState struct {
	mu      sync.Mutex
	until   time.Time     // guarded by mu
	all     bool          // guarded by mu
	changed chan struct{} // guarded by mu
}

// waitPause holds a command while a CLIENT PAUSE covers it: every command
// in ALL mode, writes (and EXEC blocks with writes) in WRITE mode. With
// flush, the replies collected so far are written before it waits (not
// while a CLIENT REPLY OFF or SKIP may still drop part of them). It
// reports false if the client went away while held.
func (c *conn) waitPause(write, flush bool) bool {
	p := &c.s.pause
	var w *closeWatch
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	for {
		p.mu.Lock()
		until, all, ch := p.until, p.all, p.changed
		p.mu.Unlock()
		d := time.Until(until)
		if d <= 0 || (!all && !write) {
			return true
		}
		if flush {
			// The replies to the commands before this one go out
			// first, as Redis sends them before it stops reading a
			// paused client's requests.
			c.flush()
			flush = false
		}
		if w == nil {
			w = c.watchClose()
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ch:
		case <-w.gone:
			t.Stop()
			return false
		case <-c.ctx.Done():
			t.Stop()
			return true
		case <-c.s.closingC:
			// A shutdown ends the wait, as Redis's SHUTDOWN does not
			// wait for paused clients: the command runs, and the
			// connection closes after it.
			t.Stop()
			return true
		}
		t.Stop()
	}
}

func (s *Server) setPause(until time.Time, all bool) {
	p := &s.pause
	p.mu.Lock()
	// As Redis's pauseClients: a pause never ends earlier, nor becomes
	// less strict, because of a later one.
	if time.Now().Before(p.until) {
		if until.Before(p.until) {
			until = p.until
		}
		all = all || p.all
	}
	p.until, p.all = until, all
	s.pauseUntil.Store(until.UnixNano())
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (s *Server) unpause() {
	p := &s.pause
	p.mu.Lock()
	p.until, p.all = time.Time{}, false
	s.pauseUntil.Store(0)
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// paused reports whether a CLIENT PAUSE may be in force at now.
func (s *Server) paused(now time.Time) bool {
	u := s.pauseUntil.Load()
	return u != 0 && now.UnixNano() < u
}

// clientKill is CLIENT KILL addr:port (old form: +OK or "No such client")
// and CLIENT KILL <filter> <value> ... (new form: the number killed), with
// the filters ID, TYPE, USER, ADDR, LADDR and SKIPME of Redis 7.0.
func clientKill(x *execCtx, args [][]byte) {
	c := x.c
	s := c.s
	var id int64 = -1
	var addr, laddr, user []byte
	typ := ""
	skipMe := true
	oldForm := len(args) == 3
	if oldForm {
		addr = args[2]
	} else {
		for i := 2; i < len(args); i += 2 {
			if i+1 >= len(args) {
				x.syntaxError()
				return
			}
			v := args[i+1]
			switch strings.ToLower(string(args[i])) {
			case "id":
				n, ok := parseInt(v)
				if !ok || n < 1 {
					x.errorf("ERR client-id should be greater than 0")
					return
				}
				id = n
			case "type":
				switch t := strings.ToLower(string(v)); t {
				case "normal", "master", "replica", "slave", "pubsub":
					typ = t
				default:
					x.errorf("ERR Unknown client type '%s'", trunc(v, 128))
					return
				}
			case "user":
				if string(v) != "default" {
					x.errorf("ERR No such user '%s'", trunc(v, 128))
					return
				}
				user = v
			case "addr":
				addr = v
			case "laddr":
				laddr = v
			case "skipme":
				switch strings.ToLower(string(v)) {
				case "yes":
					skipMe = true
				case "no":
					skipMe = false
				default:
					x.syntaxError()
					return
				}
			default:
				x.syntaxError()
				return
			}
		}
	}
	_ = user // every client is the default user
	s.mu.Lock()
	var victims []*conn
	for o := range s.conns {
		switch {
		case id >= 0 && uint64(id) != o.id,
			typ != "" && typ != "normal",
			addr != nil && !bytes.Equal(addr, []byte(o.nc.RemoteAddr().String())),
			laddr != nil && !bytes.Equal(laddr, []byte(o.nc.LocalAddr().String())),
			o == c && skipMe && !oldForm:
			continue
		}
		victims = append(victims, o)
	}
	s.mu.Unlock()
	for _, o := range victims {
		if o == c {
			c.quit = true // as Redis: closed after the reply
		} else {
			// A long command it is running (a BACKUP) stops too.
			o.leave()
			o.nc.Close()
		}
	}
	if oldForm {
		if len(victims) == 0 {
			x.errorf("ERR No such client")
		} else {
			x.ok()
		}
		return
	}
	x.out = redcon.AppendInt(x.out, int64(len(victims)))
}

// clientOnOff parses CLIENT NO-EVICT and NO-TOUCH's ON|OFF.
func clientOnOff(x *execCtx, v []byte) (bool, bool) {
	switch strings.ToLower(string(v)) {
	case "on":
		return true, true
	case "off":
		return false, true
	}
	x.syntaxError()
	return false, false
}

// unblockClient ends the WAIT that connection id is blocked in, giving
// it reason ("timeout": WAIT answers as if timed out; "error": an
// UNBLOCKED error), as Redis's CLIENT UNBLOCK. It returns 1 if the
// connection was blocked, 0 if not (or if there is no such connection).
func (s *Server) unblockClient(id int64, reason string) int64 {
	s.mu.Lock()
	var target *conn
	for c := range s.conns {
		if int64(c.id) == id {
			target = c
			break
		}
	}
	s.mu.Unlock()
	if target == nil {
		return 0
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	if target.unblock == nil {
		return 0
	}
	target.unblock <- reason // buffered, and cleared below: never blocks
	target.unblock = nil
	return 1
}

// cmdBackup is BACKUP dir: a copy of the database, taken while clients
// keep reading and writing (engine DB.Backup), into dir, an absolute path
// on the server's host that must not exist yet. It replies +OK once the
// copy is durable and whole; the copy opens as a data directory of its
// own (mvkv serve --dir dir, or mvkv verify). Who may run it:
// Config.BackupCommand.
func cmdBackup(x *execCtx, args [][]byte) error {
	s := x.c.s
	switch s.cfg.BackupCommand {
	case "yes":
	case "local":
		if isLocal(x.c.nc) {
			break
		}
		fallthrough
	default:
		x.errorf(`ERR BACKUP command not allowed. If the enable-backup-command option is set to "local", you can run it from a local connection, otherwise you need to set this option (mvkv serve --enable-backup-command), and then restart the server.`)
		return nil
	}
	dir := string(args[1])
	if !filepath.IsAbs(dir) || strings.IndexByte(dir, 0) >= 0 {
		x.errorf("ERR BACKUP needs an absolute path on the server's host, of a directory that does not exist yet")
		return nil
	}
	// A backup whose client goes away (it closes the connection, or
	// CLIENT KILL closes it) stops at its next page and removes what it
	// copied (engine DB.Backup): a copy nobody waits for would take its
	// I/O, and hold off checkpoints and vacuum, to the end.
	stop := x.c.watchClose().stop
	_, err := s.db.Backup(x.c.gone, dir)
	stop()
	if err != nil && x.c.clientGone() {
		s.log.Warn("BACKUP stopped: its client went away; the partial copy was removed", "dir", dir, "id", x.c.id, "addr", x.c.nc.RemoteAddr().String(), "err", err)
		return errClientGone
	}
	if err != nil {
		x.out = appendEngineError(x.out, err)
		return nil
	}
	// The engine logs the backup ("backup complete").
	x.ok()
	return nil
}
