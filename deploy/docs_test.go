package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The README and the Markdown pages under docs/ are the operators' and
// newcomers' reference, and they link to each other, to anchors inside each
// other and to files of the repository; the alert rules' runbook_url links
// into docs/operations/alerts.md. These tests keep every such link pointing
// at something that exists.

// docFiles lists the documentation pages whose links are checked, relative
// to the repository root: README.md and every *.md under docs/, at any depth.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 1 {
		t.Fatal("docs/ holds no *.md page")
	}
	return files
}

var (
	// mdLink matches an inline link or image: [text](target) or
	// ![alt](target), with an optional "title" after the target.
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)`)
	// codeSpan matches inline code, where brackets are not links.
	codeSpan   = regexp.MustCompile("`[^`]*`")
	mdHeading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	fenceStart = regexp.MustCompile("^\\s*(```|~~~)")
)

// markdownLinks returns the link targets of a Markdown page outside fenced
// code blocks, and the anchors its headings get, as GitHub renders them.
func markdownLinks(text string) (targets, anchors []string) {
	inFence := false
	seen := map[string]int{}
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\n")
		if fenceStart.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence || strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "" && !strings.HasPrefix(strings.TrimSpace(line), "-") {
			// Fenced or indented code; an indented list item is prose.
			continue
		}
		if m := mdHeading.FindStringSubmatch(line); m != nil {
			slug := headingAnchor(m[1])
			if n := seen[slug]; n > 0 {
				anchors = append(anchors, slug+"-"+strconv.Itoa(n))
			} else {
				anchors = append(anchors, slug)
			}
			seen[slug]++
		}
		// Link text may hold code (a linked file name); a code span never
		// holds a link.
		prose := codeSpan.ReplaceAllStringFunc(line, func(s string) string {
			if strings.Contains(s, "](") {
				return ""
			}
			return strings.Trim(s, "`")
		})
		for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
			targets = append(targets, m[1])
		}
	}
	return targets, anchors
}

// headingAnchor is the id GitHub gives a heading: its text without
// Markdown, lower-cased, punctuation other than '-' and '_' dropped, and
// each space turned into '-'.
func headingAnchor(heading string) string {
	heading = codeSpan.ReplaceAllStringFunc(heading, func(s string) string { return strings.Trim(s, "`") })
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// brokenLinks returns, for the page at path (relative to root), every
// relative link whose file does not exist, or whose #anchor names no
// heading of the Markdown page it points at.
func brokenLinks(t *testing.T, root, path string) []string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	targets, _ := markdownLinks(string(text))
	var broken []string
	for _, target := range targets {
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue // not a file of the repository
		}
		file, anchor, _ := strings.Cut(target, "#")
		resolved := path
		if file != "" {
			resolved = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
		}
		if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
			broken = append(broken, target+": no file "+filepath.ToSlash(resolved))
			continue
		}
		if anchor == "" {
			continue
		}
		if !strings.HasSuffix(resolved, ".md") {
			broken = append(broken, target+": an anchor into a file that is not Markdown")
			continue
		}
		if !slices.Contains(pageAnchors(t, filepath.Join(root, resolved)), anchor) {
			broken = append(broken, target+": no heading #"+anchor+" in "+filepath.ToSlash(resolved))
		}
	}
	return broken
}

// pageAnchors returns the heading anchors of the Markdown page at path.
func pageAnchors(t *testing.T, path string) []string {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, anchors := markdownLinks(string(text))
	return anchors
}

func TestDocsLinksResolve(t *testing.T) {
	n := 0
	for _, page := range docFiles(t) {
		text, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		targets, _ := markdownLinks(string(text))
		n += len(targets)
		for _, b := range brokenLinks(t, repoRoot, page) {
			t.Errorf("%s: broken link %s", page, b)
		}
	}
	if n == 0 {
		t.Fatal("README.md and docs/ hold no link at all: the link parser is broken")
	}
}

// TestBrokenLinksFindsBrokenLinks proves the checker on a small tree: it
// must report a missing file, a missing anchor in another page and in the
// same page, and accept the links that resolve.
func TestBrokenLinksFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# Page B\n\n## Alert: PostlineLagHigh\n\n## The job (schema v1)\n\n#### Dashboard: Postline relays & retries\n")
	write("docs/pic.png", "png")
	write("README.md", strings.Join([]string{
		"# Top",
		"## Quick start",
		"ok [b](docs/b.md), [alert](docs/b.md#alert-postlinelaghigh), [job](docs/b.md#the-job-schema-v1),",
		"ok [dash](docs/b.md#dashboard-postline-relays--retries), ![pic](docs/pic.png), [self](#quick-start),",
		"ok [web](https://example.com/x.md), [`code`](docs/b.md)",
		"bad [gone](docs/gone.md), [anchor](docs/b.md#no-such-heading), [self](#nowhere)",
		"bad [dir](docs/missing/), [png anchor](docs/pic.png#x)",
		"```",
		"[in a fence](docs/fenced.md)",
		"```",
		"`[in code](docs/code.md)`",
	}, "\n"))
	got := brokenLinks(t, root, "README.md")
	want := []string{
		"docs/gone.md: no file docs/gone.md",
		"docs/b.md#no-such-heading: no heading #no-such-heading in docs/b.md",
		"#nowhere: no heading #nowhere in README.md",
		"docs/missing/: no file docs/missing",
		"docs/pic.png#x: an anchor into a file that is not Markdown",
	}
	if !slices.Equal(got, want) {
		t.Errorf("brokenLinks =\n %q\nwant\n %q", got, want)
	}
}

func TestHeadingAnchor(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Alert: PostlineLagHigh", "alert-postlinelaghigh"},
		{"The job (schema v1)", "the-job-schema-v1"},
		{"Dashboard: Postline relays & retries", "dashboard-postline-relays--retries"},
		{"Scaling, and what bounds it", "scaling-and-what-bounds-it"},
		{"Throughput: Postline against a naive worker and smtp-source (`make bench`)", "throughput-postline-against-a-naive-worker-and-smtp-source-make-bench"},
		{"Design notes", "design-notes"},
		{"retry-scheduler", "retry-scheduler"},
	}
	for _, tt := range tests {
		if got := headingAnchor(tt.heading); got != tt.want {
			t.Errorf("headingAnchor(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}
