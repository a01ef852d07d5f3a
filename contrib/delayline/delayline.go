// Command delayline adds a fixed delay to each direction of TCP
// connections: it makes the loopback share of contrib/share.sh as slow per
// request as a real network or a VM's file share (BENCH.md: "a second share
// with injected per-operation latency").
//
//	delayline -delay 250us -listen 127.0.0.1:LPORT HOST PORT
//
// Each connection made to LPORT is forwarded to HOST:PORT. Bytes from the
// client go to HOST:PORT, and bytes from there back, each no
// sooner than -delay after they arrived: a round trip gains twice -delay.
// Nothing is reordered or dropped, and requests in flight overlap as on a
// real link (sshfs pipelines its SFTP requests): it is a delay line, not a
// rate limit.
//
// Why not netem: the kernels the bench runs on may not have it (the
// Firecracker VMs here do not), and a user-space delay touches no other
// traffic.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
)

func main() {
	delay := flag.Duration("delay", 0, "delay added to each direction (a round trip gains twice this)")
	listen := flag.String("listen", "", "accept connections on this address and forward each to HOST:PORT")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: delayline -delay DURATION -listen ADDR HOST PORT   (-delay 250us: 0.5 ms more per round trip)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 || *delay < 0 || *listen == "" {
		flag.Usage()
		os.Exit(2)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("delayline: %v", err)
	}
	log.Fatalf("delayline: %v", serve(l, net.JoinHostPort(flag.Arg(0), flag.Arg(1)), *delay))
}

// serve forwards each connection l accepts to target, until l fails.
func serve(l net.Listener, target string, delay time.Duration) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go forward(c.(*net.TCPConn), target, delay)
	}
}

// forward passes one accepted connection on to target.
func forward(c *net.TCPConn, target string, delay time.Duration) {
	defer c.Close()
	t, err := net.Dial("tcp", target)
	if err != nil {
		log.Printf("delayline: %v", err) // the client sees its connection closed, as with no server
		return
	}
	defer t.Close()
	if err := Proxy(c, c, t.(*net.TCPConn), delay); err != nil {
		log.Printf("delayline %s: %v", target, err)
	}
}

// halfCloser is a connection whose sending side closes on its own (a TCP
// connection), so that an end of input is passed on while replies still
// come back.
type halfCloser interface {
	io.ReadWriter
	CloseWrite() error
}

// Proxy copies in to conn and conn to out, each byte delayed by delay, until
// both directions have ended. The end of in closes conn's sending side; the
// end of conn closes out's sending side (or out, a Closer).
func Proxy(in io.Reader, out io.Writer, conn halfCloser, delay time.Duration) error {
	errs := make(chan error, 2)
	go func() { errs <- pump(in, conn, delay, conn.CloseWrite) }()
	go func() {
		end := func() error { return nil }
		if c, ok := out.(halfCloser); ok {
			end = c.CloseWrite
		} else if c, ok := out.(io.Closer); ok {
			end = c.Close
		}
		errs <- pump(conn, out, delay, end)
	}()
	for range 2 {
		if err := <-errs; err != nil {
			// The other direction may wait forever on a peer that is gone:
			// one broken direction ends the proxy.
			return err
		}
	}
	return nil
}

// chunk is what one read returned, and when it may be passed on.
type chunk struct {
	data []byte
	due  time.Time
	err  error // the read's error (io.EOF at the end): passed on at due
}

// pump passes what src gives to dst, each chunk delay after it was read, then
// calls end once src is done. Reading goes on while earlier chunks wait, so
// requests in flight overlap.
func pump(src io.Reader, dst io.Writer, delay time.Duration, end func() error) error {
	// Enough chunks for a pipelined burst; a full queue stops reading, as a
	// full link would.
	q := make(chan chunk, 4096)
	// Closed when the writer below stops (at the end, or on a failed
	// write): the reader then stops too, rather than wait forever on a
	// queue no one drains once src is closed.
	stopped := make(chan struct{})
	defer close(stopped)
	// send queues c, or reports that the writer has stopped. What was read
	// after it stopped is dropped at once (a select with both cases ready
	// would pick one at random and might queue it).
	send := func(c chunk) bool {
		select {
		case <-stopped:
			return false
		default:
		}
		select {
		case q <- c:
			return true
		case <-stopped:
			return false
		}
	}
	go func() {
		// One buffer to read into, and a copy of what came: most reads are
		// one SFTP request or reply of a few hundred bytes.
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !send(chunk{data: bytes.Clone(buf[:n]), due: time.Now().Add(delay)}) {
				return
			}
			if err != nil {
				send(chunk{due: time.Now().Add(delay), err: err})
				return
			}
		}
	}()
	// Go's timers wake at millisecond granularity on some kernels (the
	// runtime's poller waits in whole milliseconds); a sub-millisecond delay
	// needs a thread of its own that sleeps in nanosleep.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for c := range q {
		sleepUntil(c.due)
		if c.err != nil {
			if errors.Is(c.err, io.EOF) {
				return end()
			}
			end()
			return c.err
		}
		if _, err := dst.Write(c.data); err != nil {
			return err
		}
	}
	return nil
}

func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(d.Nanoseconds())
		_ = syscall.Nanosleep(&ts, nil) // EINTR: the loop sleeps the rest
	}
}
