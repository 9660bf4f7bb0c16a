package proxy

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the status page adds for a person reading it on call: durations in
// words, the held locks sorted by a column (?sort=), and a confirmation
// page before a release (GET /locks/{key}/confirm), which posts the
// release form only when the operator presses its button.

// humanDuration is d as a person reads it, cut (not rounded) to its two
// largest units: "850 ms", "29.4 s", "3 min 2 s", "2 h 5 min", "3 d 4 h".
func humanDuration(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(math.Floor(d.Seconds()*10)/10, 'f', 1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%d h %d min", d/time.Hour, d%time.Hour/time.Minute)
	}
	return fmt.Sprintf("%d d %d h", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}

// heldFor is how long ago a grant at ms (Unix ms) was, in words; "" when
// unknown.
func heldFor(ms *int64) string {
	if ms == nil {
		return ""
	}
	return humanDuration(time.Since(time.UnixMilli(*ms)))
}

// lockSorts are the orders of the page's held locks (?sort=), the first
// the default: by key; by TTL, the soonest to end first and those without
// a TTL last; by age, the longest held first and those of unknown age
// last.
var lockSorts = []string{"key", "ttl", "age"}

// sortParam is the request's ?sort=, the default for an unknown one.
func sortParam(r *http.Request) string {
	if s := r.URL.Query().Get("sort"); slices.Contains(lockSorts, s) {
		return s
	}
	return lockSorts[0]
}

// sortLocks orders locks by the column by (lockSorts). The page sorts what
// it lists (up to pageLocks locks); the next page is sorted on its own.
func sortLocks(locks []Lock, by string) {
	slices.SortStableFunc(locks, func(a, b Lock) int {
		switch by {
		case "ttl":
			if c := cmp.Compare(ttlOrder(a), ttlOrder(b)); c != 0 {
				return c
			}
		case "age":
			if c := cmp.Compare(grantOrder(a), grantOrder(b)); c != 0 {
				return c
			}
		}
		return strings.Compare(a.Key, b.Key)
	})
}

func ttlOrder(l Lock) int64 {
	if l.TTLMillis < 0 {
		return math.MaxInt64
	}
	return l.TTLMillis
}

func grantOrder(l Lock) int64 {
	if l.Holder.GrantedMillis == nil {
		return math.MaxInt64
	}
	return *l.Holder.GrantedMillis
}

// pageURL is the page's URL with the search, database and sort of p and
// the given cursor ("" or "0": the first page).
func (p *statusPage) pageURL(sort, cursor string) string {
	v := url.Values{}
	if p.Match != "" {
		v.Set("match", p.Match)
	}
	if p.DB != 0 {
		v.Set("db", strconv.Itoa(p.DB))
	}
	if sort != lockSorts[0] {
		v.Set("sort", sort)
	}
	if cursor != "" && cursor != "0" {
		v.Set("cursor", cursor)
	}
	if len(v) == 0 {
		return "/"
	}
	return "/?" + v.Encode()
}

// confirmPage is what the release confirmation shows.
type confirmPage struct {
	Key     string
	DB      int
	Lock    *Lock // nil when the key is free
	Back    string
	Release string // the release form's action
	Error   string
	AsOf    time.Time
}

// serveConfirm is GET /locks/{key}/confirm?db=&back=: the key's holder and
// TTL, and the form that releases it (POST /locks/{key}/release), with a
// way back to the page that asked.
func (a *Admin) serveConfirm(w http.ResponseWriter, r *http.Request, user string) {
	db, key, ok := keyRoute(w, r, http.MethodGet)
	if !ok {
		return
	}
	if !a.s.admin(user) {
		writeError(w, http.StatusForbidden, "NOPERM this user has no permissions to run the 'lockproxy|release' command")
		return
	}
	p := confirmPage{Key: key, DB: db, Back: localPath(r.FormValue("back")), AsOf: time.Now(),
		Release: "/locks/" + url.PathEscape(key) + "/release?db=" + strconv.Itoa(db)}
	ctx, cancel := a.commandCtx(r)
	defer cancel()
	if l, held, err := readLock(ctx, a.s.b, db, []byte(key)); err != nil {
		p.Error = string(a.s.errorValue("lockproxy", err, "admin_client", r.RemoteAddr).Str)
	} else if held {
		p.Lock = &l
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", pageCSP)
	if err := pageTemplate.ExecuteTemplate(w, "confirm", p); err != nil {
		a.s.log.Error("release confirmation page", "err", err)
	}
}

// localPath is back when it is a path of this site, else "/".
func localPath(back string) string {
	if strings.HasPrefix(back, "/") && !strings.HasPrefix(back, "//") && !strings.HasPrefix(back, "/\\") {
		return back
	}
	return "/"
}
