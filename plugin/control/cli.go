package control

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/driver"
)

// Commands are the command names CLI.Run knows.
var Commands = []string{"ls", "status", "flush", "logs", "metrics"}

// Usage documents the commands.
const Usage = `usage: bindstate COMMAND [OPTIONS] [ARGS]

commands (they talk to the running plugin over its control socket):
  ls                  volumes: state, source, mounts, containers using each
  status [VOLUME]     writeback health: dirty files and bytes, lag, failures, conflicts
  flush [VOLUME]      write every pending change back to the host and wait;
                      exit status 0 only if everything reached the host
  logs                recent plugin log lines (-n N, --volume NAME, -f to follow)
  metrics             Prometheus metrics, as served at GET /metrics
  version             the binary's version
  serve               run the plugin (what Docker's managed plugin and systemd run)

options:
  --format table|json   output for people (default) or scripts
  --socket PATH         control socket (default: $CONTROL_SOCKET, else found in
                        /run/docker/plugins: a plain plugin's
                        bindstate-control/control.sock, or a managed plugin's
                        <plugin ID>/bindstate-control/control.sock)
  --timeout D           flush: give up after D (e.g. 5m; default: no limit)

bindstate serve runs the plugin itself (configured by its environment); so
does bindstate with no command when it is not started from a terminal (as
Docker and systemd start it).
`

// Exit codes.
const (
	ExitOK      = 0
	ExitFailed  = 1 // the request failed, or (flush) something did not reach the host
	ExitUsage   = 2
	flushPlain  = time.Second // at most one progress line per interval when not on a terminal
	dockerWait  = 2 * time.Second
	followEvery = 500 * time.Millisecond
)

// stateCell is a volume's state as shown: with "read-only" for a volume
// created with -o readonly=true.
func stateCell(v driver.VolumeStatus) string {
	if v.ReadOnly {
		return v.State + ", read-only"
	}
	return v.State
}

// CLI runs the bindstate commands.
type CLI struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Terminal says Stderr is a terminal: flush draws a progress bar there
	// rather than printing plain lines.
	Terminal bool
	// Containers returns, for each volume name, the containers using it (by
	// default asked of Docker at DOCKER_HOST; failures leave them out).
	Containers func(ctx context.Context) (map[string][]string, error)
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

type options struct {
	format  string
	socket  string
	timeout time.Duration
	n       int
	volume  string
	follow  bool
}

// Run runs the command args[0] with the rest of args and returns the exit
// code.
func (c *CLI) Run(ctx context.Context, args []string) int {
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if len(args) == 0 || !slices.Contains(Commands, args[0]) {
		fmt.Fprint(c.Stderr, Usage)
		return ExitUsage
	}
	cmd := args[0]
	var o options
	fs := flag.NewFlagSet("bindstate "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.format, "format", "table", "")
	fs.StringVar(&o.socket, "socket", "", "")
	if cmd == "flush" {
		fs.DurationVar(&o.timeout, "timeout", 0, "")
	}
	if cmd == "logs" {
		fs.IntVar(&o.n, "n", 50, "")
		fs.StringVar(&o.volume, "volume", "", "")
		fs.BoolVar(&o.follow, "f", false, "")
		fs.BoolVar(&o.follow, "follow", false, "")
	}
	// Flags may come before or after the arguments.
	var pos []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return c.usage(cmd, err.Error())
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	if o.format != "table" && o.format != "json" {
		return c.usage(cmd, fmt.Sprintf("--format %q: use table or json", o.format))
	}
	maxArgs := map[string]int{"ls": 0, "status": 1, "flush": 1, "logs": 0, "metrics": 0}[cmd]
	if len(pos) > maxArgs {
		return c.usage(cmd, fmt.Sprintf("too many arguments: %s", strings.Join(pos, " ")))
	}
	if o.socket == "" {
		o.socket = c.Getenv(SocketEnv)
	}
	if o.socket == "" {
		s, err := Discover()
		if err != nil {
			return c.fail(err)
		}
		o.socket = s
	}
	cl := NewClient(o.socket)
	arg := ""
	if len(pos) == 1 {
		arg = pos[0]
	}
	switch cmd {
	case "ls":
		return c.ls(ctx, cl, o)
	case "status":
		return c.status(ctx, cl, o, arg)
	case "flush":
		return c.flush(ctx, cl, o, arg)
	case "logs":
		return c.logs(ctx, cl, o)
	default:
		return c.metrics(ctx, cl)
	}
}

func (c *CLI) usage(cmd, msg string) int {
	fmt.Fprintf(c.Stderr, "bindstate %s: %s\n\n%s", cmd, msg, Usage)
	return ExitUsage
}

func (c *CLI) fail(err error) int {
	fmt.Fprintf(c.Stderr, "bindstate: %v\n", err)
	return ExitFailed
}

func (c *CLI) json(v any) int {
	enc := json.NewEncoder(c.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return ExitOK
}

// volumeOut is a volume's status with the containers using it.
type volumeOut struct {
	driver.VolumeStatus
	Containers []string `json:"containers"`
}

// containers asks who uses each volume; nil (not known) on failure.
func (c *CLI) containers(ctx context.Context) map[string][]string {
	get := c.Containers
	if get == nil {
		get = func(ctx context.Context) (map[string][]string, error) { return DockerContainers(ctx, c.Getenv) }
	}
	ctx, cancel := context.WithTimeout(ctx, dockerWait)
	defer cancel()
	m, err := get(ctx)
	if err != nil {
		return nil
	}
	return m
}

func (c *CLI) withContainers(ctx context.Context, vs []driver.VolumeStatus) []volumeOut {
	cs := c.containers(ctx)
	out := make([]volumeOut, len(vs))
	for i, v := range vs {
		out[i] = volumeOut{VolumeStatus: v, Containers: cs[v.Name]}
		if cs != nil && out[i].Containers == nil {
			out[i].Containers = []string{}
		}
	}
	return out
}

func (c *CLI) ls(ctx context.Context, cl *Client, o options) int {
	vs, err := cl.Volumes(ctx)
	if err != nil {
		return c.fail(err)
	}
	out := c.withContainers(ctx, vs)
	if o.format == "json" {
		return c.json(out)
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VOLUME\tSTATE\tSOURCE\tMOUNTS\tCONTAINERS\tSTATUS")
	for _, v := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", v.Name, stateCell(v.VolumeStatus), v.Source, len(v.MountIDs), containersCell(v.Containers), health(v.VolumeStatus))
	}
	tw.Flush()
	return ExitOK
}

func containersCell(cs []string) string {
	switch {
	case cs == nil:
		return "?" // Docker not reachable
	case len(cs) == 0:
		return "-"
	}
	return strings.Join(cs, ",")
}

// health sums a volume up in a few words.
func health(v driver.VolumeStatus) string {
	switch {
	case v.Error != "":
		return "invalid: " + v.Error
	case v.Front == nil && len(v.MountIDs) == 0:
		return "not mounted"
	case v.Front == nil:
		return "not open (reopened on next mount)"
	}
	f := v.Front
	var parts []string
	if f.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failing", f.Failed))
	}
	if f.Dirty > 0 {
		parts = append(parts, fmt.Sprintf("%d to write back", f.Dirty))
	}
	if f.Conflicts > 0 {
		parts = append(parts, fmt.Sprintf("%d conflicts", f.Conflicts))
	}
	if len(parts) == 0 {
		parts = append(parts, "in sync")
	}
	s := strings.Join(parts, ", ")
	if v.Background {
		s += " (unmounted, writing back)"
	}
	return s
}

func (c *CLI) status(ctx context.Context, cl *Client, o options, name string) int {
	if name == "" {
		vs, err := cl.Volumes(ctx)
		if err != nil {
			return c.fail(err)
		}
		out := c.withContainers(ctx, vs)
		if o.format == "json" {
			return c.json(out)
		}
		tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VOLUME\tSTATE\tDIRTY\tBYTES\tLAG\tFAILED\tCONFLICTS\tLAST ERROR")
		for _, v := range out {
			if v.Front == nil {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t%s\n", v.Name, stateCell(v.VolumeStatus), health(v.VolumeStatus))
				continue
			}
			f := v.Front
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", v.Name, stateCell(v.VolumeStatus), f.Dirty, bytesCell(f.DirtyBytes),
				lagCell(f.Lag), f.Failed, f.Conflicts, orDash(f.LastError))
		}
		tw.Flush()
		return ExitOK
	}
	v, err := cl.Volume(ctx, name)
	if err != nil {
		return c.fail(err)
	}
	out := c.withContainers(ctx, []driver.VolumeStatus{v})[0]
	if o.format == "json" {
		return c.json(out)
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Volume", out.Name)
	row("State", stateCell(out.VolumeStatus))
	row("Source", out.Source)
	if out.Error != "" {
		row("Error", out.Error)
	}
	row("Store", orDash(out.Key))
	row("Mountpoint", orDash(out.Mountpoint))
	row("Mount IDs", strings.TrimSpace(fmt.Sprintf("%d %s", len(out.MountIDs), listCell(out.MountIDs))))
	row("Containers", containersCell(out.Containers))
	row("Status", health(out.VolumeStatus))
	if f := out.Front; f != nil {
		row("Dirty", fmt.Sprintf("%d files, %s", f.Dirty, bytesCell(f.DirtyBytes)))
		row("Writeback lag", lagCell(f.Lag))
		row("Written back", fmt.Sprintf("%d files, %s", f.WrittenFiles, bytesCell(int64(f.WrittenBytes))))
		row("Failed", fmt.Sprint(f.Failed))
		row("Last error", orDash(f.LastError))
		row("Conflicts", fmt.Sprint(f.Conflicts))
		row("Cache", fmt.Sprintf("%d hits, %d fetched from the host", f.CacheHits, f.Fetched))
		if f.Writers != "" {
			row("Writers", f.Writers)
		}
		if f.Xattrs != "" {
			row("Xattrs", f.Xattrs)
		}
	}
	tw.Flush()
	if f := out.Front; f != nil && len(f.FailedPaths) > 0 {
		fmt.Fprintln(c.Stdout, "Failed paths (journaled, retried):")
		for _, p := range f.FailedPaths {
			fmt.Fprintf(c.Stdout, "  %s\n", filepath.Join(out.Source, p))
		}
	}
	return ExitOK
}

func listCell(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	short := make([]string, len(ids))
	for i, id := range ids {
		short[i] = id
		if len(id) > 12 {
			short[i] = id[:12]
		}
	}
	return "(" + strings.Join(short, ", ") + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func lagCell(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// bytesCell is n in binary units.
func bytesCell(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// flush flushes and reports; ExitOK only if every volume's changes reached
// the host.
func (c *CLI) flush(ctx context.Context, cl *Client, o options, name string) int {
	p := &progressView{w: c.Stderr, bar: c.Terminal}
	final, err := cl.Flush(ctx, name, o.timeout, p.update)
	p.end()
	if err != nil {
		return c.fail(err)
	}
	if final.Error != "" {
		return c.fail(errors.New(final.Error))
	}
	failed := 0
	for _, r := range final.Results {
		if !r.OK {
			failed++
		}
	}
	if o.format == "json" {
		c.json(final.Results)
	} else {
		c.flushTable(final.Results, name)
	}
	if failed > 0 {
		fmt.Fprintf(c.Stderr, "bindstate: flush: %d of %d volumes did not reach the host; their changes stay journaled and are retried\n",
			failed, len(final.Results))
		return ExitFailed
	}
	return ExitOK
}

func (c *CLI) flushTable(results []FlushResult, name string) {
	if len(results) == 0 {
		fmt.Fprintln(c.Stdout, "nothing to flush: no volume writes back (only delegated volumes do)")
		return
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VOLUME\tSOURCE\tRESULT\tTOOK")
	for _, r := range results {
		res := "on the host"
		if !r.OK {
			res = "FAILED"
			if n := len(r.Failed); n > 0 {
				res = fmt.Sprintf("FAILED (%d paths)", n)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Volume, r.Source, res, r.Took)
	}
	tw.Flush()
	for _, r := range results {
		if r.OK {
			continue
		}
		if len(r.Failed) == 0 {
			fmt.Fprintf(c.Stdout, "%s: %s\n", r.Volume, r.Error)
			continue
		}
		fmt.Fprintf(c.Stdout, "%s: not written back:\n", r.Volume)
		for _, f := range r.Failed {
			fmt.Fprintf(c.Stdout, "  %s: %s\n", f.Path, f.Error)
		}
	}
}

// progressView shows a flush's progress: a bar redrawn in place on a
// terminal, otherwise a plain line when the count changes (at most one a
// second).
type progressView struct {
	w        io.Writer
	bar      bool
	total    int // most paths seen pending: the bar's 100%
	last     string
	lastAt   time.Time
	drawn    bool
	lastLeft int
}

func (p *progressView) update(ev FlushEvent) {
	left, bytes, failed := 0, int64(0), 0
	for _, v := range ev.Volumes {
		left += v.Dirty
		bytes += v.DirtyBytes
		failed += v.Failed
	}
	p.total = max(p.total, left)
	p.lastLeft = left
	if p.bar {
		const width = 30
		done := p.total - left
		fill := width
		if p.total > 0 {
			fill = done * width / p.total
		}
		line := fmt.Sprintf("\rflushing %d volume(s) [%s%s] %d/%d files, %s left",
			len(ev.Volumes), strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, p.total, bytesCell(bytes))
		if failed > 0 {
			line += fmt.Sprintf(", %d failing", failed)
		}
		fmt.Fprint(p.w, line+"\x1b[K")
		p.drawn = true
		return
	}
	line := fmt.Sprintf("flush: %d files (%s) left to write back", left, bytesCell(bytes))
	if failed > 0 {
		line += fmt.Sprintf(", %d failing", failed)
	}
	if line == p.last || time.Since(p.lastAt) < flushPlain && left != 0 {
		return
	}
	p.last, p.lastAt = line, time.Now()
	fmt.Fprintln(p.w, line)
}

func (p *progressView) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

func (c *CLI) logs(ctx context.Context, cl *Client, o options) int {
	recs, err := cl.Logs(ctx, 0, o.volume)
	if err != nil {
		return c.fail(err)
	}
	if o.n > 0 && len(recs) > o.n {
		recs = recs[len(recs)-o.n:]
	}
	var seq uint64
	for {
		for _, r := range recs {
			c.printLog(r, o.format)
			seq = max(seq, r.Seq)
		}
		if !o.follow {
			return ExitOK
		}
		select {
		case <-ctx.Done():
			return ExitOK
		case <-time.After(followEvery):
		}
		if recs, err = cl.Logs(ctx, seq, o.volume); err != nil {
			if ctx.Err() != nil {
				return ExitOK
			}
			return c.fail(err)
		}
	}
}

// printLog prints r as one line: JSON, or time, level, message and
// key=value pairs.
func (c *CLI) printLog(r LogRecord, format string) {
	if format == "json" {
		json.NewEncoder(c.Stdout).Encode(r)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s %s", r.Time.UTC().Format("2006-01-02T15:04:05.000Z"), r.Level, r.Message)
	writeAttrs(&b, "", r.Attrs)
	fmt.Fprintln(c.Stdout, b.String())
}

func writeAttrs(b *strings.Builder, prefix string, m map[string]any) {
	// Volume and path first: what people look for.
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int {
		rank := func(k string) int {
			switch k {
			case "volume":
				return 0
			case "path":
				return 1
			}
			return 2
		}
		if d := rank(x) - rank(y); d != 0 {
			return d
		}
		return strings.Compare(x, y)
	})
	for _, k := range keys {
		if sub, ok := m[k].(map[string]any); ok {
			writeAttrs(b, prefix+k+".", sub)
			continue
		}
		v := fmt.Sprint(m[k])
		if strings.ContainsAny(v, " \t\"=") || v == "" {
			v = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(b, " %s%s=%s", prefix, k, v)
	}
}

func (c *CLI) metrics(ctx context.Context, cl *Client) int {
	text, err := cl.Metrics(ctx)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprint(c.Stdout, text)
	return ExitOK
}
