package harness

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"
)

// ImportBusybox makes image name with docker import (no registry): a rootfs
// holding busybox (a static binary: Debian busybox-static) at /bin/busybox
// with a symlink per applet, the usual empty directories, and extra files
// (image path -> host file, copied with mode 0755) such as test helpers.
func (d *Daemon) ImportBusybox(name, busybox string, extra map[string]string) error {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", busybox, err)
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: now})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: now}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "root", "mnt", "data", "usr", "usr/bin", "sbin", "var"} {
		if err := dir(d, 0o755); err != nil {
			return err
		}
	}
	if err := dir("tmp", 0o1777); err != nil {
		return err
	}
	if err := file("bin/busybox", 0o755, bb); err != nil {
		return err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now}); err != nil {
			return err
		}
	}
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")); err != nil {
		return err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")); err != nil {
		return err
	}
	for dst, src := range extra {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := file(strings.TrimPrefix(path.Clean(dst), "/"), 0o755, b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if _, _, err := d.Run(io.Reader(&buf), "import", "--change", `CMD ["/bin/sh"]`, "-", name); err != nil {
		return err
	}
	return nil
}
