package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, made for the test and written as PEM files.
type testPKI struct {
	dir                                              string
	caFile, certFile, keyFile, clientCert, clientKey string
	pool                                             *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	write := func(name, typ string, der []byte) string {
		f := filepath.Join(p.dir, name)
		if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mvkv test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.caFile = write("ca.pem", "CERTIFICATE", caDER)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	leaf := func(serial int64, usage x509.ExtKeyUsage, certName, keyName string) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(k)
		return write(certName, "CERTIFICATE", der), write(keyName, "EC PRIVATE KEY", kder)
	}
	p.certFile, p.keyFile = leaf(2, x509.ExtKeyUsageServerAuth, "server.pem", "server-key.pem")
	p.clientCert, p.clientKey = leaf(3, x509.ExtKeyUsageClientAuth, "client.pem", "client-key.pem")
	return p
}

// TestServeTLS: with Redis's TLS options, mvkv serve accepts go-redis and
// redis-cli --tls with a client certificate, refuses a client without one
// (tls-auth-clients yes), and keeps serving the plain port.
func TestServeTLS(t *testing.T) {
	p := newTestPKI(t)
	sp := startServe(t, t.TempDir(), "--tls-port", "0", "--tls-cert-file", p.certFile, "--tls-key-file", p.keyFile,
		"--tls-ca-cert-file", p.caFile)
	if sp.tlsAddr != "" {
		t.Fatalf("--tls-port 0 opened a TLS listener on %s", sp.tlsAddr)
	}
	sp.shutdown(t)

	// A free port for the TLS listener.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	sp = startServe(t, t.TempDir(), "--tls-port", port, "--tls-cert-file", p.certFile, "--tls-key-file", p.keyFile,
		"--tls-ca-cert-file", p.caFile)
	if sp.tlsAddr == "" {
		t.Fatal("no TLS listener")
	}
	ctx := context.Background()
	cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: sp.tlsAddr, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	defer c.Close()
	if err := c.Set(ctx, "k", "over tls", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Without a client certificate the handshake fails.
	bare := redis.NewClient(&redis.Options{Addr: sp.tlsAddr, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}})
	defer bare.Close()
	if err := bare.Ping(ctx).Err(); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if bin, err := exec.LookPath("redis-cli"); err == nil {
		out, err := exec.Command(bin, "--tls", "--cacert", p.caFile, "--cert", p.clientCert, "--key", p.clientKey,
			"-h", "127.0.0.1", "-p", port, "GET", "k").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "over tls" {
			t.Fatalf("redis-cli --tls: %v: %s", err, out)
		}
	}
	// The plain port still answers.
	plain := redis.NewClient(&redis.Options{Addr: sp.addr})
	defer plain.Close()
	if v, err := plain.Get(ctx, "k").Result(); err != nil || v != "over tls" {
		t.Fatalf("plain GET: %q, %v", v, err)
	}
	// INFO and CONFIG GET name each port for what it is.
	_, plainPort, _ := net.SplitHostPort(sp.addr)
	for i := 0; i < 5; i++ { // the listeners are kept in a map: try its orders
		if info := plain.Info(ctx, "server").Val(); !strings.Contains(info, "tcp_port:"+plainPort+"\r\n") {
			t.Fatalf("INFO server does not give tcp_port:%s:\n%s", plainPort, info)
		}
		if got := plain.ConfigGet(ctx, "*port").Val(); got["port"] != plainPort || got["tls-port"] != port {
			t.Fatalf("CONFIG GET *port: %v, want port %s and tls-port %s", got, plainPort, port)
		}
	}
	if got := plain.ConfigGet(ctx, "bind").Val(); got["bind"] != "127.0.0.1" {
		t.Fatalf("CONFIG GET bind: %v", got)
	}
	sp.shutdown(t)
}

// TestServeTLSOnly: --port 0 with --tls-port serves TLS alone, as Redis's
// "port 0".
func TestServeTLSOnly(t *testing.T) {
	p := newTestPKI(t)
	port := freePort(t)
	pr, pw := io.Pipe()
	exit := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		exit <- serveRun(context.Background(), []string{"--dir", t.TempDir(), "--bind", "127.0.0.1", "--port", "0", "--tls-port", port,
			"--tls-cert-file", p.certFile, "--tls-key-file", p.keyFile, "--tls-auth-clients", "no", "--loglevel", "verbose"}, pw, &errb)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "ready to accept TLS connections on ") {
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if len(lines) == 0 || lines[len(lines)-1] != "ready to accept TLS connections on 127.0.0.1:"+port {
		t.Fatalf("output %q, stderr %s", lines, errb.String())
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "ready to accept connections") {
			t.Fatalf("a plain listener with --port 0: %q", l)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "tls only", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.ConfigGet(ctx, "*port").Val(); got["port"] != "0" || got["tls-port"] != port {
		t.Fatalf("CONFIG GET *port: %v", got)
	}
	if got := c.ConfigGet(ctx, "bind").Val(); got["bind"] != "127.0.0.1" {
		t.Fatalf("CONFIG GET bind with TLS only: %v", got)
	}
	// A plain-text client on the TLS port fails the handshake, which
	// the log says at verbose level, as Redis's.
	nc, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "PING\r\n")
	io.Copy(io.Discard, nc)
	nc.Close()
	c.Shutdown(ctx)
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), `level=VERBOSE msg="Error accepting a client connection"`) {
		t.Fatalf("no log line for the failed TLS handshake:\n%s", errb.String())
	}
}

// TestServeTLSUsage: TLS options that cannot work are refused at start:
// a bad value or a missing file option with exit status 2 (a bad value
// whether or not --tls-port is given), a file that cannot be used with 1;
// each error line has one prefix.
func TestServeTLSUsage(t *testing.T) {
	p := newTestPKI(t)
	for _, c := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"--tls-port", "1"}, 2, "mvkv serve: --tls-port needs --tls-cert-file and --tls-key-file\nTry \"mvkv serve --help\" for more information.\n"},
		{[]string{"--tls-port", "1", "--tls-cert-file", p.certFile, "--tls-key-file", p.keyFile}, 2, "mvkv serve: --tls-auth-clients yes needs --tls-ca-cert-file\nTry \"mvkv serve --help\" for more information.\n"},
		{[]string{"--tls-port", "1", "--tls-cert-file", p.certFile, "--tls-key-file", p.certFile, "--tls-auth-clients", "no"}, 1,
			"mvkv: tls: --tls-cert-file " + p.certFile + ", --tls-key-file " + p.certFile + ": found a certificate rather than a key in the PEM for the private key\n"},
		// A file that cannot be read or holds no PEM is named, with its
		// option.
		{[]string{"--tls-port", "1", "--tls-cert-file", "/nonexistent", "--tls-key-file", p.keyFile, "--tls-auth-clients", "no"}, 1,
			"mvkv: tls: --tls-cert-file: open /nonexistent: no such file or directory\n"},
		{[]string{"--tls-port", "1", "--tls-cert-file", p.certFile, "--tls-key-file", "/nonexistent", "--tls-auth-clients", "no"}, 1,
			"mvkv: tls: --tls-key-file: open /nonexistent: no such file or directory\n"},
		{[]string{"--tls-port", "1", "--tls-cert-file", p.keyFile, "--tls-key-file", p.keyFile, "--tls-auth-clients", "no"}, 1,
			"mvkv: tls: --tls-cert-file " + p.keyFile + ", --tls-key-file " + p.keyFile + ": failed to find certificate PEM data in certificate input"},
		{[]string{"--tls-port", "1", "--tls-cert-file", p.certFile, "--tls-key-file", p.keyFile, "--tls-ca-cert-file", "/nonexistent"}, 1,
			"mvkv: tls: --tls-ca-cert-file: open /nonexistent: no such file or directory\n"},
		{[]string{"--tls-port", "1", "--tls-cert-file", p.certFile, "--tls-key-file", p.keyFile, "--tls-ca-cert-file", p.keyFile}, 1,
			"mvkv: tls: --tls-ca-cert-file " + p.keyFile + " holds no PEM certificate\n"},
		{[]string{"--tls-port", "1", "--tls-cert-file", p.certFile, "--tls-key-file", p.keyFile, "--tls-auth-clients", "maybe"}, 2,
			"mvkv serve: invalid --tls-auth-clients \"maybe\" (want yes, no or optional)\n"},
		{[]string{"--tls-auth-clients", "maybe"}, 2, "mvkv serve: invalid --tls-auth-clients \"maybe\" (want yes, no or optional)\n"},
		{[]string{"--tls-auth-clients", ""}, 2, "mvkv serve: invalid --tls-auth-clients \"\" (want yes, no or optional)\n"},
		{[]string{"--tls-port", "65536"}, 2, "mvkv serve: invalid --tls-port 65536 (want 0 to 65535)\n"},
		{[]string{"--tls-port", "-1"}, 2, "mvkv serve: invalid --tls-port -1 (want 0 to 65535)\n"},
	} {
		// Cancelled: a server that starts after all stops at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out, errb strings.Builder
		args := append([]string{"--dir", t.TempDir(), "--listen", "127.0.0.1:0"}, c.args...)
		code := serveRun(ctx, args, &out, &errb)
		if code != c.status || !strings.HasPrefix(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d, stderr %q", c.args, code, errb.String(), c.status, c.want)
		}
	}
	// The values it takes, in any case, without --tls-port.
	for _, v := range []string{"yes", "no", "optional", "NO", "Optional"} {
		if ok, stderr := serveFlagAccepted(t, "tls-auth-clients", v); !ok {
			t.Errorf("--tls-auth-clients %s refused: %s", v, stderr)
		}
	}
}
