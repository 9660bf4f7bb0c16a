package tests

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser is one headless Chromium (Debian's chromium) driven over the
// DevTools protocol (chromedp), closed with the test.
type browser struct{ ctx context.Context }

// browserStep bounds each step driven in the browser: a hang fails the
// test with the step it was in, not the run.
const browserStep = time.Minute

func newBrowser(t *testing.T, chromium string) *browser {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.Flag("hide-scrollbars", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts the browser, which lives as long as the context
	// of that run: b's own, cancelled if the start hangs.
	hung := time.AfterFunc(browserStep, cancel)
	err := chromedp.Do(ctx)
	if !hung.Stop() || err != nil {
		t.Fatalf("chromium did not start within %v: %v", browserStep, err)
	}
	return &browser{ctx: ctx}
}

// do runs steps in the browser (what names them in a failure).
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("chromium: %s: %v", what, err)
	}
}

// follow runs a step that leads to another page (a click on a link or a
// button) and waits for that page.
func (b *browser) follow(t *testing.T, what string, step chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	if _, err := chromedp.RunResponse(ctx, step); err != nil {
		t.Fatalf("chromium: %s: %v", what, err)
	}
}

// read runs one action in b's browser and returns its value.
func read[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("chromium: %s: %v", what, err)
	}
	return v
}

// html loads url in a w×h viewport and returns the rendered document.
func (b *browser) html(t *testing.T, url string, w, h int) string {
	t.Helper()
	b.do(t, "load "+url, chromedp.EmulateViewport(int64(w), int64(h)), chromedp.Navigate(url))
	return read(t, b, "read "+url, chromedp.OuterHTML(chromedp.CSS("html")))
}

// layout is what the page's geometry says about its readability.
type layout struct {
	ScrollWidth, InnerWidth int
	Overflowing             []string // sections whose tables scroll sideways
	Stacked                 bool     // a held lock's cells are one under another
	Rows                    int      // held locks listed
}

const layoutJS = `(() => {
	const over = [...document.querySelectorAll('.scroll')].filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.closest('section').id);
	const row = document.querySelector('#held tr.lock');
	const c = row ? row.cells : [];
	return {ScrollWidth: document.documentElement.scrollWidth, InnerWidth: window.innerWidth, Overflowing: over,
		Stacked: c.length > 1 && c[1].getBoundingClientRect().top >= c[0].getBoundingClientRect().bottom - 1,
		Rows: document.querySelectorAll('#held tr.lock').length};
})()`

// checkLayouts loads the page at a desktop and a phone width: nothing
// scrolls sideways, neither the page nor a table in it, and a held lock's
// row stacks its cells on the phone only; each screenshot is kept in dir
// (mode-desktop.png, mode-phone.png).
func checkLayouts(t *testing.T, b *browser, url, dir, mode string) {
	t.Helper()
	for _, size := range []struct {
		name  string
		w, h  int
		stack bool
	}{{"desktop", 1280, 900, false}, {"phone", 390, 844, true}} {
		b.do(t, "load at "+size.name+" width", chromedp.EmulateViewport(int64(size.w), int64(size.h)), chromedp.Navigate(url))
		l := read(t, b, "lay out at "+size.name+" width", chromedp.Evaluate[layout](layoutJS))
		png := read(t, b, "screenshot at "+size.name+" width", chromedp.CaptureScreenshot())
		file := filepath.Join(dir, mode+"-"+size.name+".png")
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		checkPNG(t, file, size.w, size.h)
		t.Logf("screenshot %s", file)
		if l.ScrollWidth > l.InnerWidth || len(l.Overflowing) > 0 {
			t.Errorf("%s (%d px): the page is %d px wide, tables scrolling sideways in %q; want nothing wider than the window",
				size.name, size.w, l.ScrollWidth, l.Overflowing)
		}
		if l.Rows == 0 || l.Stacked != size.stack {
			t.Errorf("%s (%d px): %d held locks, a row's cells stacked = %v; want %v", size.name, size.w, l.Rows, l.Stacked, size.stack)
		}
	}
}

// heldKeysJS lists the held locks' keys and TTLs as the page shows them.
const heldKeysJS = `[...document.querySelectorAll('#held tr.lock')].map(r => [r.cells[0].textContent.trim(), r.querySelector('td.ttl').textContent.trim()])`

// checkSortedTTLs clicks the TTL column's header: the held locks keys[1]
// (a minute), keys[0] (5 min), keys[2] (2 h) come in that order, their
// TTLs in words.
func checkSortedTTLs(t *testing.T, b *browser, url string, keys []string) {
	t.Helper()
	b.do(t, "load "+url, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(url))
	b.follow(t, "sort by TTL", chromedp.Click(chromedp.CSS(`#held tr.head a[href*="sort=ttl"]`)))
	at := read(t, b, "location", chromedp.Location())
	rows := read(t, b, "list the held locks", chromedp.Evaluate[[][]string](heldKeysJS))
	var got []string
	for _, r := range rows {
		if slices.Contains(keys, r[0]) {
			got = append(got, r[0])
		}
	}
	if want := []string{keys[1], keys[0], keys[2]}; !strings.Contains(at, "sort=ttl") || !slices.Equal(got, want) {
		t.Errorf("after a click on the TTL header: %s lists %q; want sort=ttl listing %q", at, got, want)
	}
	shapes := map[string]*regexp.Regexp{
		keys[1]: regexp.MustCompile(`^[0-9]{1,2}\.[0-9] s$`),
		keys[0]: regexp.MustCompile(`^[34] min [0-9]{1,2} s$`),
		keys[2]: regexp.MustCompile(`^1 h [0-9]{1,2} min$`),
	}
	for _, r := range rows {
		if re := shapes[r[0]]; re != nil && !re.MatchString(r[1]) {
			t.Errorf("the TTL of %s reads %q; want it in words like %s", r[0], r[1], re)
		}
	}
}

// checkConfirmedRelease releases key from the page as a person would: its
// release button leads to a confirmation naming the key, where nothing is
// released yet (exists reads the key through a Redis client); its button
// releases it and comes back to the page, which no longer lists it. The
// confirmation's screenshot is kept in dir (mode-confirm.png).
func checkConfirmedRelease(t *testing.T, b *browser, url, dir, mode, key string, exists func() int64) {
	t.Helper()
	row := `//table[@id="held"]//tr[td/code[text()=` + strconv.Quote(key) + `]]//a[contains(@class,"release")]`
	b.do(t, "load "+url, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(url))
	b.follow(t, "ask to release "+key, chromedp.Click(row))
	title := read(t, b, "read the confirmation", chromedp.Text(chromedp.CSS(`#confirm h2`)))
	if dir != "" {
		png := read(t, b, "screenshot the confirmation", chromedp.CaptureScreenshot())
		file := filepath.Join(dir, mode+"-confirm.png")
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", file)
	}
	if !strings.Contains(title, key) || exists() != 1 {
		t.Fatalf("the confirmation reads %q, the key exists = %d; want it named and still held", title, exists())
	}
	b.follow(t, "confirm the release of "+key, chromedp.Click(chromedp.CSS(`#confirm button[type=submit]`)))
	back := read(t, b, "location", chromedp.Location())
	rows := read(t, b, "list the held locks", chromedp.Evaluate[[][]string](heldKeysJS))
	if n := exists(); n != 0 || strings.TrimRight(back, "/") != strings.TrimRight(url, "/") ||
		slices.ContainsFunc(rows, func(r []string) bool { return r[0] == key }) {
		t.Errorf("after the confirmed release: EXISTS %s = %d, back at %s listing %q; want 0, the page without it", key, n, back, rows)
	}
}
