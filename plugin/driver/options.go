package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// The options a volume accepts (docker volume create -o NAME=VALUE).
const (
	OptSource      = "source"      // absolute host path of the folder to serve (required)
	OptState       = "state"       // consistent, default, cached or delegated
	OptConsistency = "consistency" // alias of state, as in docker run -v ...:consistency
	OptRescan      = "rescan"      // how often host changes are looked for (cached, delegated)
	OptReadOnly    = "readonly"    // true: containers only read the volume (served without OPEN)
)

// validOptions in the order they are listed to users.
var validOptions = []string{OptSource, OptState, OptConsistency, OptRescan, OptReadOnly}

const (
	// DefaultRescan is how often host changes are looked for by default.
	DefaultRescan = time.Second
	// MinRescan is the shortest rescan interval accepted.
	MinRescan = 100 * time.Millisecond
)

// options are a volume's validated options. Comparable: two creates of one
// name are the same volume when their options are equal.
type options struct {
	Source string
	State  consistency.State // as given; may be Default
	Rescan time.Duration
	// ReadOnly: the volume is mounted read-only for every container. A
	// cached or delegated one is then served without OPEN requests (see
	// fsys.Options.ReadOnly), so it is another front than the writable
	// volume of the same source and state.
	ReadOnly bool
}

// parseOptions validates what the user gave to docker volume create. check,
// if not nil, is the host path policy applied to the source. Every error
// says what was wrong and what is valid.
func parseOptions(raw map[string]string, check func(string) error) (options, error) {
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if !slices.Contains(validOptions, k) {
			return options{}, errorf(KindInvalid, "unknown option %q: valid options are %s",
				k, strings.Join(validOptions, ", "))
		}
	}
	var o options

	o.Source = raw[OptSource]
	switch {
	case o.Source == "":
		return options{}, errorf(KindInvalid,
			"option %q is required: the absolute host path of the folder to serve, e.g. -o source=/home/me/project", OptSource)
	case !filepath.IsAbs(o.Source):
		return options{}, errorf(KindInvalid,
			"option %q must be an absolute host path (starting with /), got %q", OptSource, o.Source)
	}
	if check != nil {
		if err := check(o.Source); err != nil {
			return options{}, &Error{Kind: KindInvalid, Err: err}
		}
	}

	state, err := parseState(raw, OptState)
	if err != nil {
		return options{}, err
	}
	if alias, ok := raw[OptConsistency]; ok {
		st, err := parseState(raw, OptConsistency)
		if err != nil {
			return options{}, err
		}
		if given, both := raw[OptState]; both && st != state {
			return options{}, errorf(KindInvalid,
				"options %q and %q are aliases but disagree (%q vs %q): give only one of them",
				OptState, OptConsistency, given, alias)
		}
		state = st
	}
	o.State = state

	o.Rescan = DefaultRescan
	if v := raw[OptRescan]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return options{}, errorf(KindInvalid,
				"option %q: %q is not a duration: use a Go duration of at least %v, e.g. 1s, 500ms, 2m", OptRescan, v, MinRescan)
		}
		if d < MinRescan {
			return options{}, errorf(KindInvalid,
				"option %q: %v is too short: the minimum is %v (default %v)", OptRescan, d, MinRescan, DefaultRescan)
		}
		o.Rescan = d
	}

	if v, ok := raw[OptReadOnly]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return options{}, errorf(KindInvalid,
				"option %q: %q is not a boolean: use true (containers only read the volume) or false (the default)", OptReadOnly, v)
		}
		o.ReadOnly = b
	}
	return o, nil
}

func parseState(raw map[string]string, opt string) (consistency.State, error) {
	st, err := consistency.Parse(raw[opt])
	if err != nil {
		return 0, errorf(KindInvalid, "option %q: %v", opt, err)
	}
	return st, nil
}

// serveState is the state the volume is served in: Default is Consistent.
func (o options) serveState() consistency.State {
	if o.State == consistency.Default {
		return consistency.Consistent
	}
	return o.State
}

// key names the front shared by every volume with the same source and
// (served) state: rule D3.
func (o options) key() string {
	return frontKey(o.Source, o.serveState(), o.ReadOnly)
}

// frontKey names the front of (source, state), and of its read-only twin:
// a read-only mount is served otherwise (no OPEN), so it cannot share the
// writable one's mount. A writable front's key is the same as before
// read-only volumes existed, so its store is found again after an upgrade.
func frontKey(source string, st consistency.State, readOnly bool) string {
	id := source + "\x00" + st.String()
	if readOnly {
		id += "\x00readonly"
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:16]
}

// spec is what the Opener is given.
func (o options) spec() FrontSpec {
	return FrontSpec{
		Key:      o.key(),
		Source:   o.Source,
		State:    o.serveState(),
		ReadOnly: o.ReadOnly,
		Opts:     map[string]string{OptRescan: o.Rescan.String()},
	}
}
