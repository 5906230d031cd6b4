package bounce

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCorpus parses every .eml file under the directory named by
// POSTLINE_TEST_BOUNCE_CORPUS (for instance a checkout of a public bounce
// collection) and checks every result. Files with a message/feedback-report
// part must parse as complaints and those starting with "lhost-" or "rhost-"
// must parse as some report; it prints how many did.
func TestCorpus(t *testing.T) {
	dir := os.Getenv("POSTLINE_TEST_BOUNCE_CORPUS")
	if dir == "" {
		t.Skip("POSTLINE_TEST_BOUNCE_CORPUS is not set")
	}
	var n, reports, missed, all, withRcpt, withStatus, withID int
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".eml") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		res, err := Parse(raw)
		if errors.Is(err, ErrTooLarge) {
			return nil
		}
		if err != nil {
			t.Logf("%s: %v", path, err)
			return nil
		}
		if err := checkResult(res); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		for _, r := range res.Reports {
			all++
			if r.Recipient != "" {
				withRcpt++
			}
			if r.Status != "" || r.Kind == "complained" {
				withStatus++
			}
			if r.MessageID != "" {
				withID++
			}
		}
		base := filepath.Base(path)
		switch {
		case strings.Contains(strings.ToLower(string(raw)), "content-type: message/feedback-report") && res.Type != TypeARF:
			t.Errorf("%s: type %s, want arf", path, res.Type)
		case strings.HasPrefix(base, "lhost-") || strings.HasPrefix(base, "rhost-"):
			if res.Type == TypeNotReport {
				missed++
				t.Logf("%s: not a report", path)
			} else {
				reports++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files, %d bounces read as reports, %d missed", n, reports, missed)
	t.Logf("%d reports: %d name a recipient, %d a status (or are complaints), %d a Message-ID", all, withRcpt, withStatus, withID)
}
