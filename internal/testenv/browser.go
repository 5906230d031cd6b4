package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browser window sizes, in CSS pixels (device scale factor 1, so a
// screenshot is as many pixels wide).
const (
	DesktopWidth, DesktopHeight = 1280, 900
	PhoneWidth, PhoneHeight     = 390, 844
)

const (
	// browserStartTimeout bounds the start of chromium and its first
	// blank tab (about a second on an idle machine).
	browserStartTimeout = 60 * time.Second
	// browserNavigateTimeout bounds Navigate: the page and what it loads.
	browserNavigateTimeout = 30 * time.Second
	// browserDescribeTimeout bounds reading the URL and title for an error.
	browserDescribeTimeout = 5 * time.Second
	// browserOutputTail is how much of chromium's own output a start
	// failure quotes.
	browserOutputTail = 4 << 10
)

// BrowserOption configures Browser.
type BrowserOption func(*browserConfig)

type browserConfig struct {
	width, height int
	mobile        bool
}

// WithPhoneViewport makes the window phone-sized (PhoneWidth x
// PhoneHeight) and emulates a mobile device with touch, so the page's
// viewport meta tag and touch media queries apply.
func WithPhoneViewport() BrowserOption {
	return func(c *browserConfig) { c.width, c.height, c.mobile = PhoneWidth, PhoneHeight, true }
}

// Browser starts a headless Debian chromium ($POSTLINE_TEST_CHROMIUM, which
// scripts/stack.sh installs and its env names) with a DesktopWidth x
// DesktopHeight window, and returns a chromedp context for its one tab:
// pass it to chromedp.Run and chromedp.Do, or to Navigate, WaitVisible and
// Screenshot. The browser is stopped and its profile removed when the test
// ends. It skips t under -short or when POSTLINE_TEST_CHROMIUM is unset, and
// fails it when chromium does not start.
//
// Derive a timeout for one action from the returned context; never cancel
// the returned context itself, which stops the browser.
func Browser(t testing.TB, opts ...BrowserOption) context.Context {
	t.Helper()
	Integration(t, "Debian's chromium")
	execPath := os.Getenv("POSTLINE_TEST_CHROMIUM")
	if execPath == "" {
		t.Skip(`UI test: needs Debian's chromium, and POSTLINE_TEST_CHROMIUM is unset ` +
			`(scripts/stack.sh up installs it, scripts/stack.sh chromium only that; then eval "$(scripts/stack.sh env)")`)
	}
	if _, err := os.Stat(execPath); err != nil {
		t.Fatalf("POSTLINE_TEST_CHROMIUM: %v (scripts/stack.sh chromium installs it)", err)
	}
	cfg := browserConfig{width: DesktopWidth, height: DesktopHeight}
	for _, o := range opts {
		o(&cfg)
	}

	output := &tailBuffer{limit: browserOutputTail}
	allocOpts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		// Chromium refuses to run as root with its sandbox, and the sandbox
		// needs user namespaces that containers often lack; the browser only
		// loads pages the test itself serves.
		chromedp.NoSandbox,
		chromedp.WindowSize(cfg.width, cfg.height),
		chromedp.CombinedOutput(output),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	// chromedp.WithErrorf: chromedp's own complaints (say, an event it cannot
	// decode) go to the test's log while the test runs, and nowhere after.
	logs := &testLog{t: t}
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(logs.logf), chromedp.WithLogf(logs.logf))
	t.Cleanup(func() {
		logs.stop()
		cancelTab()
		cancelAlloc()
	})

	// The first Run binds the browser's life to its context, so the start
	// cannot have a deadline of its own: a timer stops a hung start instead.
	stalled := time.AfterFunc(browserStartTimeout, cancelTab)
	err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(cfg.width), int64(cfg.height), viewportOptions(cfg)...))
	if !stalled.Stop() {
		err = fmt.Errorf("not started within %v: %w", browserStartTimeout, err)
	}
	if err != nil {
		t.Fatalf("starting chromium %s: %v\n--- chromium's output ---\n%s", execPath, err, output)
	}
	return ctx
}

// viewportOptions: the window's size with the page's layout following it
// (chromium's default is a desktop in landscape), or a portrait phone.
func viewportOptions(cfg browserConfig) []chromedp.EmulateViewportOption {
	if cfg.mobile {
		return []chromedp.EmulateViewportOption{chromedp.EmulatePortrait, chromedp.EmulateMobile, chromedp.EmulateTouch}
	}
	return []chromedp.EmulateViewportOption{chromedp.EmulateLandscape}
}

// Navigate loads url in the browser's tab and waits for its load event,
// failing t (with the page's URL and title) when that takes longer than 30 s
// or the page cannot be loaded.
func Navigate(t testing.TB, ctx context.Context, url string) {
	t.Helper()
	nctx, cancel := context.WithTimeout(ctx, browserNavigateTimeout)
	defer cancel()
	if err := chromedp.Do(nctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("browser: navigating to %s: %v (%s)", url, err, describePage(ctx))
	}
}

// WaitVisible waits up to timeout until the first element that the CSS
// selector matches is visible. On timeout it saves a screenshot named
// "wait-failed" and fails t with the selector, the page's URL and title,
// and the screenshot's path.
func WaitVisible(t testing.TB, ctx context.Context, selector string, timeout time.Duration) {
	t.Helper()
	if err := waitVisible(t, ctx, selector, timeout); err != nil {
		t.Fatal(err)
	}
}

func waitVisible(t testing.TB, ctx context.Context, selector string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(selector)))
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("not visible within %v", timeout)
	}
	shot, shotErr := saveScreenshot(t, ctx, "wait-failed")
	if shotErr != nil {
		shot = "none: " + shotErr.Error()
	}
	return fmt.Errorf("browser: waiting for %q: %w (%s; screenshot %s)", selector, err, describePage(ctx), shot)
}

// ByLabel selects the form control whose <label> reads text (after
// trimming spaces), the way a person finds a field; use it with chromedp's
// query actions, such as chromedp.SendKeys(testenv.ByLabel("Name"), "Ada").
func ByLabel(text string) chromedp.JSPath {
	quoted, _ := json.Marshal(text) // a string always marshals
	return chromedp.JSPath(fmt.Sprintf(
		"[...document.querySelectorAll('label')].find(l => l.textContent.trim() === %s)?.control", quoted))
}

// Screenshot saves a PNG of the whole page (beyond the window when it is
// longer) as name.png in the test's ArtifactDir, logs and returns its path.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	path, err := saveScreenshot(t, ctx, name)
	if err != nil {
		t.Fatalf("browser: screenshot %q: %v (%s)", name, err, describePage(ctx))
	}
	t.Logf("screenshot: %s", path)
	return path
}

func saveScreenshot(t testing.TB, ctx context.Context, name string) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, browserNavigateTimeout)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "", err
	}
	path := filepath.Join(ArtifactDir(t), safeFileName(name)+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// describePage says where the tab is, for error messages: "page <URL>,
// title <title>", or why that could not be read.
func describePage(ctx context.Context) string {
	dctx, cancel := context.WithTimeout(ctx, browserDescribeTimeout)
	defer cancel()
	url, err := chromedp.Run(dctx, chromedp.Location())
	if err != nil {
		return fmt.Sprintf("page unknown: %v", err)
	}
	title, err := chromedp.Run(dctx, chromedp.Title())
	if err != nil {
		return fmt.Sprintf("page %s, title unknown: %v", url, err)
	}
	return fmt.Sprintf("page %s, title %q", url, title)
}

// testLog forwards to t.Logf until stop: chromedp may log from its own
// goroutines, and logging after a test ended panics.
type testLog struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (l *testLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf("chromedp: "+format, args...)
	}
}

func (l *testLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
}

// tailBuffer keeps the last limit bytes written to it; safe for concurrent
// use (chromedp writes chromium's output from its own goroutine).
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}
