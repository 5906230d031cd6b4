package testenv

import (
	"bytes"
	"context"
	"html/template"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// serveGreeter serves a form that posts a name, and a page that greets it:
// the smallest round trip a UI test makes.
func serveGreeter(t *testing.T) *httptest.Server {
	t.Helper()
	pages := template.Must(template.New("form").Parse(`<!doctype html>
<html><head><meta name="viewport" content="width=device-width, initial-scale=1"><title>Greeter</title></head>
<body><form method="post" action="/greet">
<label for="name">Name</label> <input id="name" name="name"> <button type="submit">Greet</button>
</form></body></html>
{{define "greeting"}}<!doctype html>
<html><head><meta name="viewport" content="width=device-width, initial-scale=1"><title>Greeting</title></head>
<body><p id="greeting">Hello, {{.}}!</p></body></html>{{end}}`))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		_ = pages.Execute(w, nil)
	})
	mux.HandleFunc("POST /greet", func(w http.ResponseWriter, r *http.Request) {
		_ = pages.ExecuteTemplate(w, "greeting", r.PostFormValue("name"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestBrowserFillsAFormAndTakesAScreenshot(t *testing.T) {
	tests := []struct {
		name  string
		opts  []BrowserOption
		width int
	}{
		{"desktop", nil, DesktopWidth},
		{"phone", []BrowserOption{WithPhoneViewport()}, PhoneWidth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := serveGreeter(t)
			ctx := Browser(t, tt.opts...)

			Navigate(t, ctx, srv.URL)
			if err := chromedp.Do(ctx,
				chromedp.SendKeys(ByLabel("Name"), "Ada <Lovelace>"),
				chromedp.Click(chromedp.CSS("button[type=submit]")),
			); err != nil {
				t.Fatalf("filling the form: %v", err)
			}
			WaitVisible(t, ctx, "#greeting", 10*time.Second)
			got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#greeting")))
			if err != nil {
				t.Fatalf("reading the greeting: %v", err)
			}
			if want := "Hello, Ada <Lovelace>!"; got != want {
				t.Errorf("greeting = %q, want %q", got, want)
			}
			innerWidth, err := chromedp.Run(ctx, chromedp.Evaluate[int]("window.innerWidth"))
			if err != nil {
				t.Fatalf("reading the viewport's width: %v", err)
			}
			if innerWidth != tt.width {
				t.Errorf("window.innerWidth = %d, want %d", innerWidth, tt.width)
			}

			path := Screenshot(t, ctx, "greeting")
			if want := filepath.Join(ArtifactDir(t), "greeting.png"); path != want {
				t.Errorf("screenshot path = %s, want %s", path, want)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("screenshot %s is no PNG: %v", path, err)
			}
			if w := img.Bounds().Dx(); w != tt.width {
				t.Errorf("screenshot is %d px wide, want the window's %d", w, tt.width)
			}
		})
	}
}

func TestBrowserWaitVisibleSaysWhereThePageIs(t *testing.T) {
	t.Parallel()
	srv := serveGreeter(t)
	ctx := Browser(t)
	Navigate(t, ctx, srv.URL)

	err := waitVisible(t, ctx, "#never-there", 300*time.Millisecond)
	if err == nil {
		t.Fatal("waitVisible found an element the page does not have")
	}
	msg := err.Error()
	for _, want := range []string{`"#never-there"`, "not visible within 300ms", srv.URL, `title "Greeter"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	shot := filepath.Join(ArtifactDir(t), "wait-failed.png")
	if !strings.Contains(msg, shot) {
		t.Errorf("error %q does not name the screenshot %s", msg, shot)
	}
	if _, err := os.Stat(shot); err != nil {
		t.Errorf("failure screenshot: %v", err)
	}
}

func TestBrowserOutlivesTheDeadlineOfOneAction(t *testing.T) {
	t.Parallel()
	srv := serveGreeter(t)
	ctx := Browser(t)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := chromedp.Do(short, chromedp.WaitVisible(chromedp.CSS("#never-there"))); err == nil {
		t.Fatal("waiting for an element of a blank page succeeded")
	}
	// The browser outlives the action's deadline: the tab still works.
	Navigate(t, ctx, srv.URL)
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil || title != "Greeter" {
		t.Fatalf("title = %q, %v; want Greeter", title, err)
	}
}
