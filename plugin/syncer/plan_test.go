package syncer

import (
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/store"
)

func hostFile(name string, size, mtime int64) hostpath.Entry {
	return hostpath.Entry{Name: name, Stat: unix.Stat_t{Mode: unix.S_IFREG | 0o644, Size: size, Mtim: unix.NsecToTimespec(mtime)}}
}

func hostOf(name string, mode uint32, mtime int64) hostpath.Entry {
	return hostpath.Entry{Name: name, Stat: unix.Stat_t{Mode: mode, Mtim: unix.NsecToTimespec(mtime)}}
}

func synced(e hostpath.Entry) Local {
	return Local{Name: e.Name, Mode: e.Stat.Mode, HasBase: true,
		Base: store.Base{Mode: e.Stat.Mode, Size: e.Stat.Size, Mtime: e.Stat.Mtim.Nano()}}
}

func kinds(as []Action) map[string]Kind {
	out := map[string]Kind{}
	for _, a := range as {
		out[a.Name] = a.Kind
	}
	return out
}

// The plan brings host edits in (rules C2, D6) and never touches what the
// container changed and has not written back (D7 decides those at writeback).
func TestPlan_C2_D6(t *testing.T) {
	f1 := hostFile("same", 10, 100)
	f2 := hostFile("edited", 10, 100)
	f2new := hostFile("edited", 12, 200)
	dir := hostOf("dir", unix.S_IFDIR|0o755, 100)
	dirAsFile := hostFile("dir", 1, 300)
	link := hostOf("link", unix.S_IFLNK|0o777, 100)
	linkNew := hostOf("link", unix.S_IFLNK|0o777, 400)
	none := func(string) bool { return false }
	cases := []struct {
		name  string
		host  []hostpath.Entry
		local []Local
		busy  func(string) bool
		want  map[string]Kind
	}{
		{"unchanged", []hostpath.Entry{f1}, []Local{synced(f1)}, none, map[string]Kind{}},
		{"new on host", []hostpath.Entry{f1}, nil, none, map[string]Kind{"same": Create}},
		{"edited on host", []hostpath.Entry{f2new}, []Local{synced(f2)}, none, map[string]Kind{"edited": Update}},
		{"deleted on host", nil, []Local{synced(f1)}, none, map[string]Kind{"same": Delete}},
		{"type changed", []hostpath.Entry{dirAsFile}, []Local{synced(dir)}, none, map[string]Kind{"dir": Replace}},
		{"symlink retargeted", []hostpath.Entry{linkNew}, []Local{synced(link)}, none, map[string]Kind{"link": Replace}},
		{"made in container, not on host", nil, []Local{{Name: "mine", Mode: unix.S_IFREG}}, none, map[string]Kind{}},
		// A create from the host cut short by a crash, or the container's
		// own entry already on the host: finished from the host.
		{"no base, not busy, a file on both sides", []hostpath.Entry{f1}, []Local{{Name: "same", Mode: unix.S_IFREG | 0o600}}, none,
			map[string]Kind{"same": Update}},
		{"no base, not busy, a directory on both sides", []hostpath.Entry{dir}, []Local{{Name: "dir", Mode: unix.S_IFDIR | 0o700}}, none,
			map[string]Kind{"dir": Update}},
		{"no base, busy: the container's until writeback", []hostpath.Entry{f1}, []Local{{Name: "same", Mode: unix.S_IFREG | 0o600}},
			func(n string) bool { return n == "same" }, map[string]Kind{}},
		{"no base, a file the container made where the host has a directory", []hostpath.Entry{dir}, []Local{{Name: "dir", Mode: unix.S_IFREG | 0o644}}, none,
			map[string]Kind{}},
		// A symlink without a base, not busy: a cached store's, after a
		// restart (symlink bases are kept in memory). The host's is what
		// belongs there: RefreshEntry compares the targets.
		{"a symlink without a base, not busy", []hostpath.Entry{link}, []Local{{Name: "link", Mode: unix.S_IFLNK | 0o777}}, none,
			map[string]Kind{"link": Update}},
		{"a symlink without a base, busy: the container's until writeback", []hostpath.Entry{link}, []Local{{Name: "link", Mode: unix.S_IFLNK | 0o777}},
			func(n string) bool { return n == "link" }, map[string]Kind{}},
		{"a symlink without a base, not busy, gone from the host", nil, []Local{{Name: "link", Mode: unix.S_IFLNK | 0o777}}, none,
			map[string]Kind{"link": Delete}},
		{"a file without a base, gone from the host: the container's, not written back yet", nil, []Local{{Name: "same", Mode: unix.S_IFREG | 0o644}}, none,
			map[string]Kind{}},
		{"edited on both: container wins until writeback (D7)", []hostpath.Entry{f2new}, []Local{synced(f2)},
			func(n string) bool { return n == "edited" }, map[string]Kind{}},
		{"deleted in container, still on host", []hostpath.Entry{f1}, nil,
			func(n string) bool { return n == "same" }, map[string]Kind{}},
		{"deleted on host while container writes", nil, []Local{synced(f1)},
			func(n string) bool { return n == "same" }, map[string]Kind{}},
		// rule D8: special nodes have no base and mirror the host's.
		{"D8 FIFO on both sides", []hostpath.Entry{hostOf("p", unix.S_IFIFO|0o644, 1)},
			[]Local{{Name: "p", Mode: unix.S_IFIFO | 0o644}}, none, map[string]Kind{}},
		{"D8 FIFO gone on host", nil, []Local{{Name: "p", Mode: unix.S_IFIFO | 0o644}}, none, map[string]Kind{"p": Delete}},
		{"D8 FIFO became a socket on host", []hostpath.Entry{hostOf("p", unix.S_IFSOCK|0o755, 1)},
			[]Local{{Name: "p", Mode: unix.S_IFIFO | 0o644}}, none, map[string]Kind{"p": Replace}},
		{"directory mtime only", []hostpath.Entry{hostOf("dir", unix.S_IFDIR|0o755, 999)}, []Local{synced(dir)}, none,
			map[string]Kind{"dir": Update}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := kinds(Plan(c.host, c.local, c.busy))
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("plan = %v, want %v", got, c.want)
			}
		})
	}
}

func TestPlanIsSortedAndCarriesHostAttrs(t *testing.T) {
	host := []hostpath.Entry{hostFile("b", 1, 1), hostFile("a", 2, 2)}
	got := Plan(host, []Local{{Name: "c", Mode: unix.S_IFREG, HasBase: true}}, func(string) bool { return false })
	if len(got) != 3 || got[0].Name != "a" || got[1].Name != "b" || got[2].Name != "c" {
		t.Fatalf("not sorted: %+v", got)
	}
	if got[0].Host.Size != 2 {
		t.Fatalf("host attrs lost: %+v", got[0])
	}
}

// Looking at a large tree on a slow share backs off: checks take at most a
// tenth of the time, sweeps (the costly kind) a thirtieth, so there is no
// polling storm, and small trees are looked at every interval (C5: host
// changes may arrive late, but they do arrive).
func TestC5_RescanIntervalBacksOffForSlowScans(t *testing.T) {
	every := time.Second
	for _, c := range []struct {
		took      time.Duration
		dutyCycle int64
		want      time.Duration
	}{
		{10 * time.Millisecond, checkDutyCycle, every},
		{10 * time.Millisecond, sweepDutyCycle, every},
		{200 * time.Millisecond, checkDutyCycle, 1800 * time.Millisecond},
		{2 * time.Second, sweepDutyCycle, 58 * time.Second},
	} {
		if got := nextLook(every, c.took, c.dutyCycle); got != c.want {
			t.Errorf("a look that took %v, duty cycle 1/%d: next in %v, want %v", c.took, c.dutyCycle, got, c.want)
		}
	}
}

// A sweep made while the container was still walking a tree saw a few of
// its directories: the next is spaced by what it will cost for all of them
// now watched, not by what the small one took (no full sweep right after
// the walk, C5 as above).
func TestC5_SweepsAreSpacedByWhatTheNextWillCost(t *testing.T) {
	if got := sweepCost(100*time.Millisecond, 10, 1000); got != 10*time.Second {
		t.Errorf("100 ms over 10 directories, 1,000 watched now: cost %v, want 10s", got)
	}
	for _, c := range []struct{ swept, watched int }{{1000, 1000}, {1000, 10}, {0, 1000}} {
		if got := sweepCost(time.Second, c.swept, c.watched); got != time.Second {
			t.Errorf("1 s over %d directories, %d watched now: cost %v, want the last sweep's 1s", c.swept, c.watched, got)
		}
	}
}
