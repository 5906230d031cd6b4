package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSafeFileName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"greeting", "greeting"},
		{"wait-failed_2.v1", "wait-failed_2.v1"},
		{"a b/c\\d:e", "a_b_c_d_e"},
		{"", "_"},
		{".", "_."},
		{"..", "_.."},
		{"é", "__"},
	}
	for _, tt := range tests {
		if got := safeFileName(tt.in); got != tt.want {
			t.Errorf("safeFileName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestArtifactDir(t *testing.T) {
	t.Run("from the environment", func(t *testing.T) {
		root := t.TempDir()
		t.Setenv("POSTLINE_TEST_ARTIFACTS", root)
		t.Run("sub:test", func(t *testing.T) {
			want := filepath.Join(root, "TestArtifactDir", "from_the_environment", "sub_test")
			if got := ArtifactDir(t); got != want {
				t.Errorf("ArtifactDir = %s, want %s", got, want)
			}
			if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
				t.Errorf("ArtifactDir did not make %s: %v", want, err)
			}
		})
	})
	t.Run("in the repository by default", func(t *testing.T) {
		t.Setenv("POSTLINE_TEST_ARTIFACTS", "")
		root, err := filepath.Abs("../..") // internal/testenv
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(root, ".artifacts", "TestArtifactDir", "in_the_repository_by_default")
		if got := ArtifactDir(t); got != want {
			t.Errorf("ArtifactDir = %s, want %s", got, want)
		}
		if err := os.Remove(want); err != nil {
			t.Errorf("removing the empty %s: %v", want, err)
		}
	})
}
