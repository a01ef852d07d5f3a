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
//	bstool msync FILE TEXT  make FILE hold TEXT through a shared mmap, then
//	                      msync(MS_SYNC) it (rule D2)
//	bstool setxattr PATH NAME VALUE  set an extended attribute
//	bstool acklog DIR N SYNCEVERY  append N records round-robin to DIR/f0..f7,
//	                      printing "w I" once write I returned and "s I" once
//	                      the fsync after record I returned (every SYNCEVERY
//	                      records; 0: never): what the container saw succeed
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
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: bstool watch|fsync|fdatasync|syncfs|mkfifo|mksock PATH | msync FILE TEXT | acklog DIR N SYNCEVERY")
		os.Exit(2)
	}
	arg := os.Args[2]
	var err error
	switch os.Args[1] {
	case "msync":
		if len(os.Args) != 4 {
			err = fmt.Errorf("usage: bstool msync FILE TEXT")
		} else {
			err = msync(arg, os.Args[3])
		}
	case "setxattr":
		if len(os.Args) != 5 {
			err = fmt.Errorf("usage: bstool setxattr PATH NAME VALUE")
		} else {
			err = syscall.Setxattr(arg, os.Args[3], []byte(os.Args[4]), 0)
		}
	case "acklog":
		if len(os.Args) != 5 {
			err = fmt.Errorf("usage: bstool acklog DIR N SYNCEVERY")
		} else {
			err = acklog(arg, os.Args[3], os.Args[4])
		}
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

func msync(path, text string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(int64(len(text))); err != nil {
		return err
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, len(text), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return err
	}
	copy(m, text)
	if _, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), syscall.MS_SYNC); e != 0 {
		syscall.Munmap(m)
		return e
	}
	return syscall.Munmap(m)
}

// Record is the line acklog writes as record i: fixed size, so that a
// test can find each one on the host.
func record(i int) string {
	head := fmt.Sprintf("rec %07d ", i)
	return head + strings.Repeat(string(rune('a'+i%26)), 1023-len(head)) + "\n"
}

func acklog(dir, ns, everys string) error {
	var n, every int
	if _, err := fmt.Sscan(ns, &n); err != nil {
		return err
	}
	if _, err := fmt.Sscan(everys, &every); err != nil {
		return err
	}
	var files [8]*os.File
	for k := range files {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("f%d", k)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		files[k] = f
	}
	for i := 0; i < n; i++ {
		f := files[i%len(files)]
		if _, err := f.WriteString(record(i)); err != nil {
			return fmt.Errorf("write %d: %w", i, err)
		}
		os.Stdout.WriteString(fmt.Sprintf("w %d\n", i))
		if every > 0 && (i+1)%every == 0 {
			if err := f.Sync(); err != nil {
				return fmt.Errorf("fsync %d: %w", i, err)
			}
			os.Stdout.WriteString(fmt.Sprintf("s %d\n", i))
		}
	}
	os.Stdout.WriteString("done\n")
	return nil
}
