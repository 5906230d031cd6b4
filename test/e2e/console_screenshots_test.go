package e2e

import (
	"bytes"
	"cmp"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// docsScreenshotsEnv names the variable that, set to 1, makes
// TestConsoleInABrowser copy its screenshots into docs/console/ (small:
// cropped and reduced to a palette), for docs/console.md.
const docsScreenshotsEnv = "POSTLINE_DOCS_SCREENSHOTS"

// docsScreenshots are the screenshots docs/console.md shows, by name.
var docsScreenshots = []string{"2-search", "3-mail", "4-suppressions", "5b-redrive-count", "6-audit", "7-search-phone", "8-mail-phone"}

// Bounds of a screenshot kept in docs/console/.
const (
	// maxDocScreenshotPixels crops a long page (to 1100 px at desktop
	// width, longer at phone width): the top of a page shows what the
	// page is for.
	maxDocScreenshotPixels = 1280 * 1100
	// maxDocScreenshotBytes keeps the repository small.
	maxDocScreenshotBytes = 150 << 10
	// paletteSize is a PNG palette's size: console pages have a few flat
	// colours and the grey and blue edges of their text.
	paletteSize = 256
)

// exportScreenshots writes small copies of the screenshots at paths that
// docsScreenshots names into
// docs/console/ when docsScreenshotsEnv is 1 and t has not failed, and
// fails t when one is larger than maxDocScreenshotBytes.
func exportScreenshots(t *testing.T, paths []string) {
	t.Helper()
	if os.Getenv(docsScreenshotsEnv) != "1" {
		return
	}
	if t.Failed() {
		t.Logf("%s: screenshots not copied into docs/console/: the test failed", docsScreenshotsEnv)
		return
	}
	// The test runs in test/e2e.
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s: no module root at %s: %v", docsScreenshotsEnv, root, err)
	}
	dir := filepath.Join(root, "docs", "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if !slices.Contains(docsScreenshots, strings.TrimSuffix(filepath.Base(path), ".png")) {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		small, err := shrinkScreenshot(data)
		if err != nil {
			t.Fatalf("screenshot %s: %v", path, err)
		}
		if len(small) > maxDocScreenshotBytes {
			t.Errorf("screenshot %s is %d bytes once reduced, over %d: not copied", path, len(small), maxDocScreenshotBytes)
			continue
		}
		out := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(out, small, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("copied to %s (%d bytes)", out, len(small))
	}
}

// shrinkScreenshot crops a PNG to maxDocScreenshotPixels and re-encodes it
// with a palette of its most frequent colours, each pixel mapped to the
// nearest.
func shrinkScreenshot(data []byte) ([]byte, error) {
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	b := img.Bounds()
	b.Max.Y = min(b.Max.Y, b.Min.Y+maxDocScreenshotPixels/max(1, b.Dx()))
	palette := frequentColors(img, b, paletteSize)
	out := image.NewPaletted(image.Rect(0, 0, b.Dx(), b.Dy()), palette)
	nearest := map[color.RGBA]uint8{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := rgba(img.At(x, y))
			i, ok := nearest[c]
			if !ok {
				i = uint8(palette.Index(c))
				nearest[c] = i
			}
			out.SetColorIndex(x-b.Min.X, y-b.Min.Y, i)
		}
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// frequentColors returns the n colours of img within b that cover the
// most pixels, counting colours that differ by less than 1/32 per
// channel as one (represented by its most frequent member).
func frequentColors(img image.Image, b image.Rectangle, n int) color.Palette {
	type bucket struct {
		count int
		best  color.RGBA
		seen  map[color.RGBA]int
	}
	buckets := map[uint32]*bucket{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := rgba(img.At(x, y))
			key := uint32(c.R>>3)<<10 | uint32(c.G>>3)<<5 | uint32(c.B>>3)
			bk := buckets[key]
			if bk == nil {
				bk = &bucket{seen: map[color.RGBA]int{}}
				buckets[key] = bk
			}
			bk.count++
			bk.seen[c]++
			if bk.seen[c] > bk.seen[bk.best] {
				bk.best = c
			}
		}
	}
	list := make([]*bucket, 0, len(buckets))
	for _, bk := range buckets {
		list = append(list, bk)
	}
	slices.SortFunc(list, func(a, b *bucket) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(colorKey(a.best), colorKey(b.best)))
	})
	palette := make(color.Palette, 0, n)
	for _, bk := range list[:min(n, len(list))] {
		palette = append(palette, bk.best)
	}
	return palette
}

func colorKey(c color.RGBA) uint32 {
	return uint32(c.R)<<16 | uint32(c.G)<<8 | uint32(c.B)
}

// rgba is c as opaque 8-bit RGB (screenshots have no transparency).
func rgba(c color.Color) color.RGBA {
	r, g, b, _ := c.RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0xff}
}

func TestShrinkScreenshot(t *testing.T) {
	tests := []struct {
		name          string
		width, height int
		wantHeight    int
	}{
		{"desktop page, cropped", 1280, 2000, 1100},
		{"phone page, longer before the crop", 390, 4000, maxDocScreenshotPixels / 390},
		{"short page, whole", 1280, 300, 300},
	}
	// Flat colours as a page has them: fewer than a palette holds, so
	// they must come back exactly.
	colours := []color.RGBA{{0xff, 0xff, 0xff, 0xff}, {0x1b, 0x1f, 0x24, 0xff}, {0x0a, 0x58, 0xca, 0xff}, {0xd0, 0xd7, 0xde, 0xff}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := image.NewRGBA(image.Rect(0, 0, tt.width, tt.height))
			for y := range tt.height {
				for x := range tt.width {
					img.SetRGBA(x, y, colours[(x/7+y/5)%len(colours)])
				}
			}
			var in bytes.Buffer
			if err := png.Encode(&in, img); err != nil {
				t.Fatal(err)
			}
			out, err := shrinkScreenshot(in.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			got, err := png.Decode(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("the reduced screenshot is no PNG: %v", err)
			}
			if b := got.Bounds(); b.Dx() != tt.width || b.Dy() != tt.wantHeight {
				t.Fatalf("reduced to %v, want %dx%d", b, tt.width, tt.wantHeight)
			}
			for y := range tt.wantHeight {
				for x := range tt.width {
					if c := rgba(got.At(x, y)); c != img.RGBAAt(x, y) {
						t.Fatalf("pixel (%d,%d) = %v, want %v", x, y, c, img.RGBAAt(x, y))
					}
				}
			}
		})
	}
}
