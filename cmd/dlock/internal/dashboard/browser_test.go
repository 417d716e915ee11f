// These tests drive the dlock dashboard in a real headless Chromium
// (Debian's chromium, driven over the DevTools protocol with chromedp): the
// page loads without console errors, and a lock taken through the /v1 API
// appears in the live table and disappears when released.
package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
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
