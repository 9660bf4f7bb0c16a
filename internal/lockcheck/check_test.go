package lockcheck

import (
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	ms := time.Millisecond
	iv := func(key string, w int, start, end int) Interval {
		return Interval{Key: key, Worker: w, Start: time.Duration(start) * ms, End: time.Duration(end) * ms}
	}
	tests := []struct {
		name  string
		ivs   []Interval
		want  int
		worst time.Duration
	}{
		{"empty", nil, 0, 0},
		{"one", []Interval{iv("k", 0, 0, 10)}, 0, 0},
		{"back to back", []Interval{iv("k", 0, 0, 10), iv("k", 1, 10, 20)}, 0, 0},
		{"gap", []Interval{iv("k", 0, 0, 10), iv("k", 1, 11, 20)}, 0, 0},
		{"overlap", []Interval{iv("k", 0, 0, 10), iv("k", 1, 7, 20)}, 1, 3 * ms},
		{"unsorted input", []Interval{iv("k", 1, 7, 20), iv("k", 0, 0, 10)}, 1, 3 * ms},
		{"contained", []Interval{iv("k", 0, 0, 30), iv("k", 1, 5, 10)}, 1, 5 * ms},
		{"same start", []Interval{iv("k", 0, 5, 8), iv("k", 1, 5, 10)}, 1, 3 * ms},
		{"same worker never conflicts", []Interval{iv("k", 0, 0, 10), iv("k", 0, 5, 20)}, 0, 0},
		{"different keys", []Interval{iv("a", 0, 0, 10), iv("b", 1, 5, 20)}, 0, 0},
		{"empty interval", []Interval{iv("k", 0, 0, 10), iv("k", 1, 5, 5), iv("k", 2, 6, 4)}, 0, 0},
		{"three way", []Interval{iv("k", 0, 0, 10), iv("k", 1, 2, 12), iv("k", 2, 4, 6)}, 3, 8 * ms},
		{"long holder spans many", []Interval{iv("k", 0, 0, 100), iv("k", 1, 10, 20), iv("k", 2, 30, 40), iv("k", 1, 50, 60)}, 3, 10 * ms},
		{"key change resets", []Interval{iv("a", 0, 0, 100), iv("b", 1, 10, 20), iv("b", 2, 20, 30)}, 0, 0},
		{"one ns", []Interval{iv("k", 0, 0, 10), {Key: "k", Worker: 1, Start: 10*ms - 1, End: 20 * ms}}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, worst := Check(tt.ivs)
			if len(got) != tt.want || worst != tt.worst {
				t.Errorf("Check(%v) = %d violations, worst %v; want %d, %v\n%v", tt.ivs, len(got), worst, tt.want, tt.worst, got)
			}
			for _, v := range got {
				if v.A.Worker == v.B.Worker || v.A.Key != v.B.Key || v.Overlap <= 0 || v.A.Start > v.B.Start {
					t.Errorf("bad violation %+v", v)
				}
			}
		})
	}
}

func TestErrorKind(t *testing.T) {
	tests := []struct {
		err  string
		want string
	}{
		{"TRYAGAIN quorum not reached: 1 of 3 nodes answered", KindTryAgain},
		{"dial tcp 127.0.0.1:1: connect: connection refused", KindRefused},
		{"read tcp 127.0.0.1:5->127.0.0.1:6: i/o timeout", KindTimeout},
		{"read tcp 127.0.0.1:5->127.0.0.1:6: read: connection reset by peer", KindConnLost},
		{"ERR unknown command", KindOther},
	}
	for _, tt := range tests {
		if got := ErrorKind(errString(tt.err)); got != tt.want {
			t.Errorf("ErrorKind(%q) = %q; want %q", tt.err, got, tt.want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestConfigValidate(t *testing.T) {
	nl := func(int) Locker { return nil }
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults with duration", Config{Duration: time.Second, NewLocker: nl}, true},
		{"no stop condition", Config{NewLocker: nl}, false},
		{"no locker", Config{Duration: time.Second}, false},
		{"ttl under drift", Config{Duration: time.Second, TTL: 2 * time.Millisecond, NewLocker: nl}, false},
		{"negative workers", Config{Duration: time.Second, Workers: -1, NewLocker: nl}, false},
	}
	for _, tt := range tests {
		err := tt.cfg.withDefaults().Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v; want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestCheckFences(t *testing.T) {
	ms := time.Millisecond
	iv := func(key string, sent, start time.Duration, fence uint64) Interval {
		return Interval{Key: key, Sent: sent * ms, Start: start * ms, End: (start + 5) * ms, Fence: fence}
	}
	cases := []struct {
		name string
		ivs  []Interval
		want int
	}{
		{"growing", []Interval{iv("k", 0, 1, 10), iv("k", 2, 3, 11), iv("k", 4, 5, 20)}, 0},
		{"equal after", []Interval{iv("k", 0, 1, 10), iv("k", 2, 3, 10)}, 1},
		{"smaller after", []Interval{iv("k", 0, 1, 10), iv("k", 2, 3, 11), iv("k", 4, 5, 9)}, 1},
		{"concurrent asks are not ordered", []Interval{iv("k", 0, 3, 11), iv("k", 1, 2, 10)}, 0},
		{"keys apart", []Interval{iv("a", 0, 1, 10), iv("b", 2, 3, 5)}, 0},
	}
	for _, c := range cases {
		if got := CheckFences(c.ivs); len(got) != c.want {
			t.Errorf("%s: %d violations (%+v); want %d", c.name, len(got), got, c.want)
		}
	}
}
