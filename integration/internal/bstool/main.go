// Command bstool is a small static helper put into the test image beside
// busybox, for what Debian's busybox-static lacks:
//
//	bstool watch DIR      print one line per inotify event on DIR:
//	                      "EVENT NAME CONTENT" where CONTENT is what NAME
//	                      reads right after the event was delivered ("-" for
//	                      a directory or a file that cannot be read), so a
//	                      test can check rules C2 and D1; "ready" first
//	bstool fsync FILE     open FILE and fsync it (rule D2)
//	bstool fdatasync FILE open FILE and fdatasync it
//	bstool syncfs PATH    syncfs on the file system holding PATH
//	bstool mkfifo PATH    mkfifo, printing the errno name on failure
//	bstool mksock PATH    bind a unix socket at PATH (and leave it)
//
// It is built with CGO_ENABLED=0 by the integration tests.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: bstool watch|fsync|fdatasync|syncfs|mkfifo|mksock PATH")
		os.Exit(2)
	}
	arg := os.Args[2]
	var err error
	switch os.Args[1] {
	case "watch":
		err = watch(arg)
	case "fsync", "fdatasync", "syncfs":
		err = syncOne(os.Args[1], arg)
	case "mkfifo":
		err = syscall.Mkfifo(arg, 0o644)
	case "mksock":
		err = mksock(arg)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bstool %s %s: %v\n", os.Args[1], arg, err)
		if en, ok := err.(syscall.Errno); ok {
			fmt.Fprintf(os.Stderr, "errno %d\n", int(en))
		}
		os.Exit(1)
	}
}

func syncOne(how, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	switch how {
	case "fsync":
		return syscall.Fsync(int(f.Fd()))
	case "fdatasync":
		return syscall.Fdatasync(int(f.Fd()))
	default:
		_, _, e := syscall.Syscall(sysSyncfs, f.Fd(), 0, 0)
		if e != 0 {
			return e
		}
		return nil
	}
}

func mksock(path string) error {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	return syscall.Bind(fd, &syscall.SockaddrUnix{Name: path})
}

var events = []struct {
	mask uint32
	name string
}{
	{syscall.IN_CREATE, "create"},
	{syscall.IN_MODIFY, "modify"},
	{syscall.IN_CLOSE_WRITE, "close_write"},
	{syscall.IN_MOVED_TO, "moved_to"},
	{syscall.IN_MOVED_FROM, "moved_from"},
	{syscall.IN_DELETE, "delete"},
	{syscall.IN_ATTRIB, "attrib"},
}

func watch(dir string) error {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return err
	}
	var mask uint32
	for _, e := range events {
		mask |= e.mask
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, mask); err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	buf := make([]byte, 64*1024)
	for {
		n, err := syscall.Read(fd, buf)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return err
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameb := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			name := strings.TrimRight(string(nameb), "\x00")
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			for _, e := range events {
				if ev.Mask&e.mask == 0 {
					continue
				}
				content := "-"
				if name != "" && ev.Mask&syscall.IN_ISDIR == 0 && ev.Mask&(syscall.IN_DELETE|syscall.IN_MOVED_FROM) == 0 {
					if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
						content = strings.NewReplacer("\n", `\n`, " ", `\s`).Replace(string(b))
					}
				}
				fmt.Fprintf(out, "%s %s %s\n", e.name, name, content)
			}
		}
		out.Flush()
	}
}
