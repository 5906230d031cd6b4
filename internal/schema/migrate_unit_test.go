package schema

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadMigrations(t *testing.T) {
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		want    []int
		wantErr string
	}{
		{
			name: "ordered by number, not name",
			fsys: fstest.MapFS{
				"migrations/0010_b.sql":  {Data: []byte("SELECT 10")},
				"migrations/0002_a.sql":  {Data: []byte("SELECT 2")},
				"migrations/README.md":   {Data: []byte("ignored")},
				"migrations/0001_x.sql":  {Data: []byte("SELECT 1")},
				"migrations/sub/0003.sq": {Data: []byte("ignored")},
			},
			want: []int{1, 2, 10},
		},
		{
			name:    "bad name",
			fsys:    fstest.MapFS{"migrations/init.sql": {Data: []byte("x")}},
			wantErr: "NNNN_description.sql",
		},
		{
			name: "duplicate version",
			fsys: fstest.MapFS{
				"migrations/0001_a.sql": {Data: []byte("x")},
				"migrations/001_b.sql":  {Data: []byte("y")},
			},
			wantErr: "already used",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			migs, err := loadMigrations(tt.fsys)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, m := range migs {
				got = append(got, m.version)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("versions = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("versions = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestEmbeddedMigrations(t *testing.T) {
	migs, err := loadMigrations(migrationFS)
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) == 0 || migs[0].version != 1 || !strings.Contains(migs[0].sql, "CREATE TABLE postline_messages") {
		t.Fatalf("embedded migrations = %+v, want 0001 creating postline_messages", migs)
	}
	for i, m := range migs {
		if m.version != i+1 {
			t.Errorf("migration %s has version %d, want %d (no gaps)", m.name, m.version, i+1)
		}
	}
}

func TestMigrateLockKey(t *testing.T) {
	if migrateLockKey("a") == migrateLockKey("b") {
		t.Error("schemas a and b share a migration lock key")
	}
	if migrateLockKey("public") != migrateLockKey("public") {
		t.Error("lock key is not deterministic")
	}
}
