package control

import (
	"bufio"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/bindstate/bindstate/plugin/driver"
)

// metrics answers GET /metrics in Prometheus' text format (version 0.0.4).
//
// Store-level series carry a "store" label (the key naming one (source,
// state): volumes naming the same pair share one store, rule D3) with its
// source and state; bindstate_volume_info joins volumes to stores. Summing
// over stores therefore never counts a shared store twice.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	m := &metricWriter{w: bw}

	m.family("bindstate_info", "gauge", "The plugin's version.")
	m.sample("bindstate_info", labels{"version", s.Version}, 1)

	c := s.Driver.Counters()
	m.family("bindstate_requests_total", "counter", "Docker volume protocol requests served, by op.")
	for _, op := range driver.Ops {
		m.sample("bindstate_requests_total", labels{"op", op}, float64(c.Requests[op]))
	}
	m.family("bindstate_request_errors_total", "counter", "Docker volume protocol requests that failed, by op and kind.")
	for _, k := range slices.Sorted(maps.Keys(c.Errors)) {
		op, kind, _ := strings.Cut(k, "/")
		m.sample("bindstate_request_errors_total", labels{"op", op, "kind", kind}, float64(c.Errors[k]))
	}
	m.family("bindstate_flushes_total", "counter", "Flushes asked for over the control socket (bindstate flush).")
	m.sample("bindstate_flushes_total", nil, float64(c.Flushes))
	m.family("bindstate_flush_failures_total", "counter", "Flushes that left changes not on the host.")
	m.sample("bindstate_flush_failures_total", nil, float64(c.FlushFailures))

	vols := s.Driver.StatusAll(r.Context())
	m.family("bindstate_volumes", "gauge", "Volumes known to the plugin.")
	m.sample("bindstate_volumes", nil, float64(len(vols)))
	m.family("bindstate_volume_info", "gauge", "One per volume: its store, source and state.")
	for _, v := range vols {
		m.sample("bindstate_volume_info", labels{"volume", v.Name, "store", v.Key, "source", v.Source, "state", v.State}, 1)
	}
	m.family("bindstate_volume_mounts", "gauge", "Active Docker mounts of each volume.")
	for _, v := range vols {
		m.sample("bindstate_volume_mounts", labels{"volume", v.Name}, float64(len(v.MountIDs)))
	}

	// One set of store series per open store.
	type store struct {
		l  labels
		fs *driver.FrontStatus
	}
	var stores []store
	seen := map[string]bool{}
	for _, v := range vols {
		if v.Front == nil || seen[v.Key] {
			continue
		}
		seen[v.Key] = true
		stores = append(stores, store{labels{"store", v.Key, "source", v.Source, "state", v.State}, v.Front})
	}
	gauge := func(name, help string, val func(*driver.FrontStatus) float64) {
		m.family(name, "gauge", help)
		for _, st := range stores {
			m.sample(name, st.l, val(st.fs))
		}
	}
	counter := func(name, help string, val func(*driver.FrontStatus) float64) {
		m.family(name, "counter", help)
		for _, st := range stores {
			m.sample(name, st.l, val(st.fs))
		}
	}
	gauge("bindstate_dirty_files", "Paths changed in the store and not on the host yet.",
		func(f *driver.FrontStatus) float64 { return float64(f.Dirty) })
	gauge("bindstate_dirty_bytes", "Size of the dirty files' content.",
		func(f *driver.FrontStatus) float64 { return float64(f.DirtyBytes) })
	gauge("bindstate_failed_files", "Paths whose last writeback failed (retried).",
		func(f *driver.FrontStatus) float64 { return float64(f.Failed) })
	gauge("bindstate_writeback_lag_seconds", "Age of the oldest change not on the host.",
		func(f *driver.FrontStatus) float64 { return f.Lag.Seconds() })
	counter("bindstate_written_back_files_total", "Paths written back to the host.",
		func(f *driver.FrontStatus) float64 { return float64(f.WrittenFiles) })
	counter("bindstate_written_back_bytes_total", "File content written back to the host.",
		func(f *driver.FrontStatus) float64 { return float64(f.WrittenBytes) })
	counter("bindstate_writeback_errors_total", "Failed writeback attempts.",
		func(f *driver.FrontStatus) float64 { return float64(f.Errors) })
	counter("bindstate_conflicts_total", "Host copies kept aside because host and container both changed a path (rule D7).",
		func(f *driver.FrontStatus) float64 { return float64(f.Conflicts) })
	counter("bindstate_cache_fetches_total", "Files whose content was fetched from the host (cache misses).",
		func(f *driver.FrontStatus) float64 { return float64(f.Fetched) })
	counter("bindstate_cache_hits_total", "Opens served from content already in the store.",
		func(f *driver.FrontStatus) float64 { return float64(f.CacheHits) })
	m.family("bindstate_ops_total", "counter", "Container file operations served, by kind.")
	for _, st := range stores {
		for _, op := range slices.Sorted(maps.Keys(st.fs.Ops)) {
			m.sample("bindstate_ops_total", append(slices.Clone(st.l), "op", op), float64(st.fs.Ops[op]))
		}
	}
}

// labels are name, value pairs.
type labels []string

type metricWriter struct{ w *bufio.Writer }

func (m *metricWriter) family(name, typ, help string) {
	fmt.Fprintf(m.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (m *metricWriter) sample(name string, l labels, v float64) {
	m.w.WriteString(name)
	if len(l) > 0 {
		m.w.WriteByte('{')
		for i := 0; i+1 < len(l); i += 2 {
			if i > 0 {
				m.w.WriteByte(',')
			}
			fmt.Fprintf(m.w, "%s=\"%s\"", l[i], escapeLabel(l[i+1]))
		}
		m.w.WriteByte('}')
	}
	fmt.Fprintf(m.w, " %g\n", v)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(v string) string { return labelEscaper.Replace(v) }
