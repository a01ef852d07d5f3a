package control

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/bindstate/bindstate/plugin/driver"
)

// DefaultProgressEvery is how often a flush reports progress.
const DefaultProgressEvery = 250 * time.Millisecond

// Server answers the control API for a Driver.
type Server struct {
	Driver  *driver.Driver
	Ring    *Ring        // log records for /v1/logs (none if nil)
	Log     *slog.Logger // default slog.Default()
	Version string
	// ProgressEvery is how often a flush reports progress
	// (default DefaultProgressEvery).
	ProgressEvery time.Duration
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": s.Version})
	})
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Driver.StatusAll(r.Context()))
	})
	mux.HandleFunc("GET /v1/volumes/{name}", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Driver.Status(r.Context(), r.PathValue("name"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /v1/flush", s.flush)
	mux.HandleFunc("GET /v1/logs", s.logs)
	mux.HandleFunc("GET /metrics", s.metrics)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// writeError answers err with the status its kind calls for.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch driver.KindOf(err) {
	case driver.KindNotFound:
		code = http.StatusNotFound
	case driver.KindInvalid:
		code = http.StatusBadRequest
	case driver.KindInUse, driver.KindConflict:
		code = http.StatusConflict
	}
	writeJSON(w, code, errorBody{Error: err.Error()})
}

// flush flushes one volume (?volume=NAME) or every volume that writes back,
// streaming FlushEvents as JSON lines: progress, then the outcome. An
// optional ?timeout= (Go duration) bounds it; so does the client hanging up.
func (s *Server) flush(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "timeout=" + strconv.Quote(v) + ": must be a positive duration, e.g. 5m"})
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	var targets []driver.VolumeStatus
	if name := q.Get("volume"); name != "" {
		st, err := s.Driver.Status(ctx, name)
		if err != nil {
			writeError(w, err)
			return
		}
		targets = append(targets, st)
	} else {
		for _, st := range s.Driver.StatusAll(ctx) {
			if st.Error == "" && st.State == "delegated" {
				targets = append(targets, st)
			}
		}
	}

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	var wmu sync.Mutex
	enc := json.NewEncoder(w)
	fl, _ := w.(http.Flusher)
	send := func(ev FlushEvent) {
		wmu.Lock()
		defer wmu.Unlock()
		enc.Encode(ev)
		if fl != nil {
			fl.Flush()
		}
	}
	progress := func() {
		ev := FlushEvent{Volumes: make([]FlushProgress, 0, len(targets))}
		for _, t := range targets {
			p := FlushProgress{Volume: t.Name}
			if st, err := s.Driver.Status(ctx, t.Name); err == nil && st.Front != nil {
				p.Dirty, p.DirtyBytes, p.Failed = st.Front.Dirty, st.Front.DirtyBytes, st.Front.Failed
			}
			ev.Volumes = append(ev.Volumes, p)
		}
		send(ev)
	}

	results := make([]FlushResult, len(targets))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i, t := range targets {
			wg.Go(func() {
				start := time.Now()
				err := s.Driver.Flush(ctx, t.Name)
				res := FlushResult{Volume: t.Name, Source: t.Source, OK: err == nil, Took: time.Since(start).Round(time.Millisecond).String()}
				if err != nil {
					res.Error = err.Error()
					res.Failed = driver.FailedPaths(err, t.Source)
				}
				results[i] = res
			})
		}
		wg.Wait()
	}()

	every := s.ProgressEvery
	if every <= 0 {
		every = DefaultProgressEvery
	}
	progress()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
			progress()
		}
	}
	progress()
	send(FlushEvent{Done: true, Results: results})
	failed := 0
	for _, res := range results {
		if !res.OK {
			failed++
		}
	}
	s.log().Info("flush requested over the control socket", "volume", q.Get("volume"), "volumes", len(results), "failed", failed)
}

// logs answers the records kept with a sequence number above ?after= (all
// by default), optionally only those naming ?volume=.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "after=" + strconv.Quote(v) + ": must be a record's seq"})
			return
		}
		after = n
	}
	recs := []LogRecord{}
	if s.Ring != nil {
		recs = s.Ring.Records(after)
	}
	if vol := r.URL.Query().Get("volume"); vol != "" {
		kept := recs[:0]
		for _, rec := range recs {
			if rec.Attrs["volume"] == vol {
				kept = append(kept, rec)
			}
		}
		recs = kept
	}
	writeJSON(w, http.StatusOK, recs)
}
