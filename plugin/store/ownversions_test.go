package store

import (
	"testing"
	"time"
)

// rule D7: a version a share shows counts as no host edit only if the
// store recorded it for the same file before that file's base, lately.
func TestD7_OwnVersionsCountOnlyAFilesEarlierVersionsLately(t *testing.T) {
	v := func(size int64) Base { return Base{Mode: 0o100644, Size: size, Mtime: 1e18} }
	var o ownVersions
	o.add(1, v(1))
	o.add(1, v(2))
	o.add(2, v(10))
	for _, c := range []struct {
		base, shown Base
		want        bool
		why         string
	}{
		{v(2), v(1), true, "an earlier version of the same file"},
		{v(1), v(2), false, "a version recorded after the base"},
		{v(2), v(3), false, "a version never recorded"},
		{v(10), v(1), false, "another file's version"},
	} {
		if got := o.has(c.base, c.shown); got != c.want {
			t.Errorf("%s: has(base %v, shown %v) = %v, want %v", c.why, c.base, c.shown, got, c.want)
		}
	}

	for i := int64(100); i < 100+ownVersionsPerFile+1; i++ {
		o.add(3, v(i))
	}
	last := v(100 + ownVersionsPerFile)
	if o.has(last, v(100)) {
		t.Errorf("file 3 keeps more than %d versions", ownVersionsPerFile)
	}
	if !o.has(last, v(101)) {
		t.Errorf("file 3 lost a version within the last %d", ownVersionsPerFile)
	}

	o.byIno[1][0].at = time.Now().Add(-ownVersionsKeep)
	if o.has(v(2), v(1)) {
		t.Errorf("a version older than %v still counts", ownVersionsKeep)
	}

	for ino := uint64(1000); ino < 1000+ownVersionsFiles; ino++ {
		o.add(ino, v(int64(ino)))
	}
	if _, ok := o.byIno[2]; ok || len(o.byIno) > ownVersionsFiles {
		t.Errorf("%d files kept, file 2 among them: %v; want at most %d, the latest", len(o.byIno), ok, ownVersionsFiles)
	}
}
