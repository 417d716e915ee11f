// These tests drive the dlock dashboard in a real headless Chromium
// (Debian's chromium, driven over the DevTools protocol with chromedp): the
// page loads without console errors, a lock taken through the /v1 API
// appears in the live table and disappears when released, and each lock
// shows who holds it and for how long (kept as a screenshot: see
// TestOwnerAndAge).
package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// browser returns the path of a Chromium, or skips the test (fails it
// under CI=true, where scripts/test.sh installs one).
func browser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium in PATH (scripts/test.sh installs Debian's chromium)")
	}
	t.Skip("no chromium in PATH; install Debian's chromium to run the browser tests")
	return ""
}

// startServer serves the dashboard over the memory store on a free
// loopback port until the test ends.
func startServer(t *testing.T, cfg server.Config) string {
	t.Helper()
	m := dlockprom.New()
	l, err := dlock.New(memory.New(), dlock.WithObserver(m.Observe))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics, cfg.StoreName, cfg.SnapshotInterval = m, "memory", 200*time.Millisecond
	srv, err := server.New(l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
		l.Close()
	})
	return "http://" + ln.Addr().String()
}

// consoleErrors collects what the page reports as errors.
type consoleErrors struct {
	mu   sync.Mutex
	msgs []string
}

func (c *consoleErrors) add(s string) {
	c.mu.Lock()
	c.msgs = append(c.msgs, s)
	c.mu.Unlock()
}

func (c *consoleErrors) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.msgs...)
}

// newTab starts a headless Chromium and returns a tab's context and the
// collector of its console errors.
func newTab(t *testing.T) (context.Context, *consoleErrors) {
	t.Helper()
	path := browser(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	errs := &consoleErrors{}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				errs.add("console." + string(ev.Type) + ": " + strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			errs.add(fmt.Sprintf("exception: %s at %s:%d", msg, d.URL, d.LineNumber))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				errs.add("log: " + ev.Entry.Text + " " + ev.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx, errs
}

func postJSON(t *testing.T, url, body string, hdr ...string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", url, resp.StatusCode, buf.Bytes())
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return out
}

// rowSelector selects the table row of the lock name.
func rowSelector(name string) string {
	q := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name)
	return `#locks tr[data-name="` + q + `"]`
}

// text returns the text of the first element matching sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

// TestLockAppearsAndDisappears: the page goes live without console
// errors; a lock acquired through /v1 shows up with its mode, holders and
// fence, and leaves the table when released. A lock name that looks like
// HTML is shown as text.
func TestLockAppearsAndDisappears(t *testing.T) {
	ctx, errs := newTab(t)
	base := startServer(t, server.Config{})
	defer http.DefaultClient.CloseIdleConnections()

	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#conn.live`)),
		chromedp.WaitVisible(chromedp.CSS(`#empty`)),
	); err != nil {
		t.Fatalf("loading the dashboard: %v (console: %q)", err, errs.list())
	}

	const name = "orders/<b>settlement</b>"
	escaped := strings.NewReplacer("/", "%2F", "<", "%3C", ">", "%3E").Replace(name)
	g := postJSON(t, base+"/v1/locks/"+escaped+"/acquire", `{"ttlMs":60000}`)
	token, _ := g["token"].(string)
	fence := fmt.Sprint(int64(g["fence"].(float64)))

	row := rowSelector(name)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
		t.Fatalf("waiting for the lock to appear: %v (console: %q)", err, errs.list())
	}
	shownName, mode := text(t, ctx, row+" td.name"), text(t, ctx, row+" .mode")
	holders, shownFence := text(t, ctx, row+" td:nth-child(3)"), text(t, ctx, row+" td.fence")
	if shownName != name || mode != "mutex" || holders != "1" || shownFence != fence {
		t.Errorf("row = %q %q %q %q, want %q mutex 1 %s", shownName, mode, holders, shownFence, name, fence)
	}
	if ttl := text(t, ctx, row+" .ttltext"); !strings.HasSuffix(ttl, "s") {
		t.Errorf("TTL shown as %q", ttl)
	}
	nodes, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll(`#locks b`), chromedp.AtLeast(0)))
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 0 {
		t.Errorf("the lock name was rendered as HTML")
	}
	page, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page, token) {
		t.Errorf("the page shows the lease token")
	}

	postJSON(t, base+"/v1/locks/"+escaped+"/release", `{"token":"`+token+`"}`)
	if err := chromedp.Do(ctx,
		chromedp.WaitNotPresent(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.CSS(`#empty`)),
	); err != nil {
		t.Fatalf("waiting for the lock to disappear: %v (console: %q)", err, errs.list())
	}
	// The activity feed saw both.
	if feed := text(t, ctx, "#events"); !strings.Contains(feed, "acquired") || !strings.Contains(feed, "released") {
		t.Errorf("activity feed = %q, want the acquire and the release", feed)
	}
	if e := errs.list(); len(e) > 0 {
		t.Errorf("console errors: %q", e)
	}
}

// TestAuthPrompt: with a bearer token configured, the page asks for it and
// goes live once it is given.
func TestAuthPrompt(t *testing.T) {
	ctx, errs := newTab(t)
	base := startServer(t, server.Config{AuthToken: "e2e-secret"})
	defer http.DefaultClient.CloseIdleConnections()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#auth-form`)),
		chromedp.SendKeys(chromedp.CSS(`#auth-token`), "e2e-secret"),
		chromedp.Click(chromedp.CSS(`#auth-form button`)),
		chromedp.WaitVisible(chromedp.CSS(`#conn.live`)),
		chromedp.WaitNotVisible(chromedp.CSS(`#auth`)),
	); err != nil {
		t.Fatalf("auth flow: %v (console: %q)", err, errs.list())
	}
	postJSON(t, base+"/v1/locks/guarded/acquire", `{}`, "Authorization", "Bearer e2e-secret")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(rowSelector("guarded")))); err != nil {
		t.Fatalf("waiting for the lock: %v", err)
	}
	// The browser logs the first, expected 401 of /v1/events as an error.
	for _, e := range errs.list() {
		if !strings.Contains(e, "401") {
			t.Errorf("console error: %s", e)
		}
	}
}

// texts returns the text of every element matching sel (none: empty).
func texts(t *testing.T, ctx context.Context, sel string) []string {
	t.Helper()
	js := `Array.from(document.querySelectorAll(` + strconv.Quote(sel) + `), (e) => e.textContent)`
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
	if err != nil {
		t.Fatalf("texts of %s: %v", sel, err)
	}
	return out
}

// ageSeconds parses an age as the dashboard shows it (12s, 4m 05s).
var ageRE = regexp.MustCompile(`^(?:(\d+)m )?(\d+)s$`)

func ageSeconds(t *testing.T, s string) int {
	t.Helper()
	m := ageRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("age shown as %q, want 12s or 4m 05s", s)
	}
	mins, _ := strconv.Atoi("0" + m[1])
	sec, _ := strconv.Atoi(m[2])
	return mins*60 + sec
}

// screenshotDir is where TestOwnerAndAge keeps its screenshot:
// $DLOCK_SCREENSHOTS when set (CI keeps it as an artefact), else the
// test's temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("DLOCK_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// decodePNG decodes a screenshot.
func decodePNG(t *testing.T, what string, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: not a PNG: %v", what, err)
	}
	return img
}

// differingPixels counts the pixels that differ between two images of the
// same size (-1 when the sizes differ).
func differingPixels(a, b image.Image) int {
	if a.Bounds() != b.Bounds() {
		return -1
	}
	n := 0
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if a.At(x, y) != b.At(x, y) {
				n++
			}
		}
	}
	return n
}

// TestOwnerAndAge: each held lock shows who holds it and for how long, one
// line per hold for shared holds (the owner and data each acquire
// recorded, and its age, the server's ageMs of each snapshot), as DOM text and
// as pixels in a screenshot of the page, which is kept (screenshotDir). A
// force-release shows in the activity feed with who forced and who held.
func TestOwnerAndAge(t *testing.T) {
	ctx, errs := newTab(t)
	base := startServer(t, server.Config{})
	defer http.DefaultClient.CloseIdleConnections()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#conn.live`)),
	); err != nil {
		t.Fatalf("loading the dashboard: %v (console: %q)", err, errs.list())
	}

	job := postJSON(t, base+"/v1/locks/jobs%2Fnightly/acquire", `{"ttlMs":60000,"mode":"mutex","owner":"web-1/4242","data":"build 7"}`)
	for _, o := range []string{"reader-a", "reader-b"} {
		postJSON(t, base+"/v1/locks/reports%2Fdaily/acquire", `{"ttlMs":60000,"mode":"read","owner":"`+o+`"}`)
	}
	jobRow, readRow := rowSelector("jobs/nightly"), rowSelector("reports/daily")
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(jobRow+" .holder .owner")),
		chromedp.WaitVisible(chromedp.CSS(readRow+" .holder:nth-child(2) .owner")),
	); err != nil {
		t.Fatalf("waiting for the owners: %v (console: %q)", err, errs.list())
	}
	if got := texts(t, ctx, jobRow+" .holder .owner"); !slices.Equal(got, []string{"web-1/4242"}) {
		t.Errorf("jobs/nightly owners shown = %q, want [web-1/4242]", got)
	}
	if got := texts(t, ctx, jobRow+" .holder .data"); !slices.Equal(got, []string{"build 7"}) {
		t.Errorf("jobs/nightly data shown = %q, want [build 7]", got)
	}
	got := texts(t, ctx, readRow+" .holder .owner")
	slices.Sort(got)
	if !slices.Equal(got, []string{"reader-a", "reader-b"}) {
		t.Errorf("reports/daily owners shown = %q, want reader-a and reader-b, one line each", got)
	}
	if ages := texts(t, ctx, readRow+" .holder .age"); len(ages) != 2 {
		t.Errorf("reports/daily ages shown = %q, want one per reader", ages)
	}

	// The age counts on: wait until it has grown past what was first shown.
	age0 := ageSeconds(t, text(t, ctx, jobRow+" .holder .age"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => {
		const m = /^(\d+)s$/.exec(document.querySelector(%q).textContent);
		return m !== null && Number(m[1]) > %d;
	})()`, jobRow+" .holder .age", age0), chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0))); err != nil {
		t.Fatalf("the age stayed at %ds: %v", age0, err)
	}
	age := text(t, ctx, jobRow+" .holder .age")
	if s := ageSeconds(t, age); s <= age0 || s > 90 {
		t.Errorf("age shown as %q after %ds first, want more, and at most the test's 90s", age, age0)
	}

	// The screenshot, kept; and the owner and age are really painted: the
	// cell's pixels change when its text is made transparent.
	if err := chromedp.Do(ctx, chromedp.WaitNotPresent(chromedp.CSS(`#locks tr.fresh`))); err != nil {
		t.Fatal(err)
	}
	cellSel := jobRow + " td.owners"
	inView, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect();
		return r.width > 0 && r.height > 0 && r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight; })()`, cellSel)))
	if err != nil {
		t.Fatal(err)
	}
	full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	cell, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(cellSel)))
	if err != nil {
		t.Fatalf("screenshot of the owner cell: %v", err)
	}
	hide := fmt.Sprintf(`document.querySelector(%q).style.color = "transparent"`, cellSel)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](hide)); err != nil {
		t.Fatal(err)
	}
	blank, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(cellSel)))
	if err != nil {
		t.Fatalf("screenshot of the owner cell without its text: %v", err)
	}
	path := filepath.Join(screenshotDir(t), "dashboard-owner-age.png")
	if err := os.WriteFile(path, full, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	if img := decodePNG(t, "the page", full); img.Bounds().Dx() != 1280 {
		t.Errorf("page screenshot %v, want 1280 wide", img.Bounds())
	}
	if !inView {
		t.Errorf("the owner cell of jobs/nightly is outside the 1280x800 view")
	}
	// An age ticking between the two shots changes a few pixels at most;
	// the owner, data and age together far more.
	if n := differingPixels(decodePNG(t, "the cell", cell), decodePNG(t, "the blank cell", blank)); n < 200 {
		t.Errorf("the owner cell's text changes %d pixels, want it painted (200 or more)", n)
	}

	// A force-release: the row goes, the feed names who forced and who held.
	postJSON(t, base+"/v1/locks/jobs%2Fnightly/force-release", `{}`)
	if err := chromedp.Do(ctx, chromedp.WaitNotPresent(chromedp.CSS(jobRow))); err != nil {
		t.Fatalf("waiting for the forced lock to go: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`document.querySelector("#events").textContent.includes("force-released")`,
		chromedp.WithPollingTimeout(0))); err != nil {
		t.Fatalf("waiting for the forced event: %v", err)
	}
	feed := text(t, ctx, `#events li.forced`)
	if !strings.Contains(feed, "jobs/nightly") || !strings.Contains(feed, "held by web-1/4242") || !strings.Contains(feed, "by 127.0.0.1:") {
		t.Errorf("forced event shown as %q, want the name, who forced and who held", feed)
	}
	page, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := job["token"].(string); tok == "" || strings.Contains(page, tok) {
		t.Errorf("the page shows the lease token (or the acquire gave none)")
	}
	if e := errs.list(); len(e) > 0 {
		t.Errorf("console errors: %q", e)
	}
}
