package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer accepts one connection and sends back what it reads, closing
// its side when the client's ends.
func echoServer(t *testing.T) *net.TCPConn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// proxied starts Proxy between pipes and an echo server: what the test
// writes to in comes back on out.
func proxied(t *testing.T, delay time.Duration) (in *io.PipeWriter, out *io.PipeReader, done chan error) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done = make(chan error, 1)
	conn := echoServer(t)
	go func() { done <- Proxy(inR, outW, conn, delay) }()
	return inW, outR, done
}

func TestEveryByteArrivesInOrderAndTheEndIsPassedOn(t *testing.T) {
	in, out, done := proxied(t, 200*time.Microsecond)
	want := make([]byte, 2<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(r.IntN(256))
	}
	go func() {
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(70000))
			in.Write(rest[:n])
			rest = rest[n:]
		}
		in.Close() // the end of input: the server sees EOF and closes too
	}()
	got, err := io.ReadAll(out)
	if err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echo differs: got %d bytes, want %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Proxy: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Proxy did not return after both directions ended")
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestARoundTripTakesTwiceTheDelay(t *testing.T) {
	const delay = 30 * time.Millisecond
	in, out, _ := proxied(t, delay)
	defer in.Close()
	buf := make([]byte, 1)
	for i := range 3 {
		start := time.Now()
		in.Write([]byte{byte(i)})
		if _, err := io.ReadFull(out, buf); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 2*delay {
			t.Fatalf("round trip %d took %v, want at least twice the delay (%v)", i, rtt, 2*delay)
		}
		if buf[0] != byte(i) {
			t.Fatalf("round trip %d echoed %d", i, buf[0])
		}
	}
}

// Requests in flight overlap, as sshfs's pipelined SFTP requests do on a
// real link: ten sent 1 ms apart come back in about one round trip, not ten.
func TestRequestsInFlightOverlap(t *testing.T) {
	const delay = 50 * time.Millisecond
	const n = 10
	in, out, _ := proxied(t, delay)
	defer in.Close()
	start := time.Now()
	go func() {
		for i := range n {
			in.Write([]byte{byte(i)})
			time.Sleep(time.Millisecond)
		}
	}()
	buf := make([]byte, n)
	if _, err := io.ReadFull(out, buf); err != nil {
		t.Fatal(err)
	}
	// Passed on one after the other they would take at least n delays
	// (0.5 s); overlapped, about one round trip (0.11 s). Half of n delays
	// leaves room for a slow CI.
	if took := time.Since(start); took >= n*delay/2 {
		t.Fatalf("%d pipelined requests took %v: passed on one at a time (a round trip is %v)", n, took, 2*delay)
	}
	for i := range n {
		if buf[i] != byte(i) {
			t.Fatalf("reply %d is %d: reordered", i, buf[i])
		}
	}
}

func TestAListenerForwardsEachConnectionWithTheDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go serve(l, echo.Addr().String(), delay)

	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := []byte{byte(i), 'x', 'y'}
			start := time.Now()
			c.Write(msg)
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil {
				errs <- fmt.Errorf("connection %d: %v", i, err)
				return
			}
			if rtt := time.Since(start); rtt < 2*delay {
				errs <- fmt.Errorf("connection %d: round trip %v, want at least %v", i, rtt, 2*delay)
				return
			}
			if !bytes.Equal(got, msg) {
				errs <- fmt.Errorf("connection %d: echoed %q, sent %q", i, got, msg)
				return
			}
			errs <- nil
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// laterReadsWait gives a byte at its first Read and at each later one once
// release is closed, counting the Reads.
type laterReadsWait struct {
	release chan struct{}
	reads   atomic.Int64
}

func (r *laterReadsWait) Read(p []byte) (int, error) {
	if r.reads.Add(1) > 1 {
		<-r.release
	}
	p[0] = 'x'
	return 1, nil
}

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

// A direction whose write fails ends, and its reader with it: a reader left
// reading fills the queue no one drains and waits on it forever, one
// goroutine (and connection) per broken connection for the life of the
// share.
func TestAFailedWriteStopsTheReaderOfThatDirection(t *testing.T) {
	src := &laterReadsWait{release: make(chan struct{})}
	if err := pump(src, brokenWriter{}, 0, func() error { return nil }); err == nil {
		t.Fatal("pump returned no error for a write that failed")
	}
	close(src.release) // what was read from here on has nowhere to go
	time.Sleep(300 * time.Millisecond)
	if n := src.reads.Load(); n > 2 {
		t.Fatalf("the reader went on reading after its direction ended: %d reads, want at most 2", n)
	}
}
