package operator

import (
	"strings"
	"testing"
	"time"
)

func TestParseRole(t *testing.T) {
	tests := []struct {
		in      string
		want    Role
		canAct  bool
		wantErr bool
	}{
		{in: "viewer", want: RoleViewer},
		{in: "operator", want: RoleOperator, canAct: true},
		{in: "admin", wantErr: true},
		{in: "Operator", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseRole(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseRole(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if got.CanAct() != tt.canAct {
			t.Errorf("%q.CanAct() = %v, want %v", got, got.CanAct(), tt.canAct)
		}
	}
}

func TestThrottleWait(t *testing.T) {
	th := Throttle{FreeFailures: 5, First: time.Second, Max: time.Minute, Forget: time.Hour}
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{0, 0}, {1, 0}, {5, 0},
		{6, time.Second}, {7, 2 * time.Second}, {8, 4 * time.Second},
		{10, 16 * time.Second}, {11, 32 * time.Second},
		{12, time.Minute}, {13, time.Minute}, {1000, time.Minute},
	}
	for _, tt := range tests {
		if got := th.Wait(tt.failures); got != tt.want {
			t.Errorf("Wait(%d) = %s, want %s", tt.failures, got, tt.want)
		}
	}
	// The defaults: ten wrong passwords for one account block the next try.
	if DefaultAccountThrottle.Wait(10) <= 0 {
		t.Error("the default account throttle lets an eleventh try in at once after ten wrong passwords")
	}
	if DefaultAccountThrottle.Wait(1<<30) != DefaultAccountThrottle.Max {
		t.Error("the default account throttle does not stop at its Max")
	}
}

func TestClientAddress(t *testing.T) {
	tests := []struct{ in, want string }{
		{"192.0.2.7:5123", "192.0.2.7"},
		{"192.0.2.7", "192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"[::ffff:192.0.2.7]:80", "192.0.2.7"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"not an address", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := ClientAddress(tt.in); got != tt.want {
			t.Errorf("ClientAddress(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// testHash are cheap costs: the tests check the format, not the strength.
var testHash = HashParams{MemoryKiB: 64, Passes: 1, Lanes: 1}

func TestHashAndVerifyPassword(t *testing.T) {
	hash, err := HashPassword("correct horse battery", testHash)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(hash, "$argon2id$v=19$m=64,t=1,p=1$") || strings.Contains(hash, "horse") {
		t.Fatalf("hash %q: want an argon2id PHC string without the password", hash)
	}
	other, _ := HashPassword("correct horse battery", testHash)
	if other == hash {
		t.Error("two hashes of one password are equal: the salt is not random")
	}
	for _, tt := range []struct {
		password string
		want     bool
	}{{"correct horse battery", true}, {"correct horse batterY", false}, {"", false}} {
		if ok, err := VerifyPassword(hash, tt.password); err != nil || ok != tt.want {
			t.Errorf("VerifyPassword(%q) = %v, %v; want %v", tt.password, ok, err, tt.want)
		}
	}
}

func TestParsePHCRefuses(t *testing.T) {
	good, _ := HashPassword("x", testHash)
	salt, key := strings.Split(good, "$")[4], strings.Split(good, "$")[5]
	for _, bad := range []string{
		"",
		"$2a$10$abcdefghijklmnopqrstuv",
		"$argon2i$v=19$m=64,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=16$m=64,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=4194304,t=1,p=1$" + salt + "$" + key, // 4 GiB
		"$argon2id$v=19$m=64,t=100,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=64,t=0,p=1$" + salt + "$" + key,
		"$argon2id$v=19$t=1,m=64,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=064,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=64,t=1,p=1$!!$" + key,
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$",
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key + "$",
	} {
		if _, err := parsePHC(bad); err == nil {
			t.Errorf("parsePHC(%q) accepted it", bad)
		} else if strings.Contains(err.Error(), salt) {
			t.Errorf("parsePHC error quotes the hash: %v", err)
		}
	}
}

func TestCheckPasswordAndName(t *testing.T) {
	for _, tt := range []struct {
		password string
		ok       bool
	}{{"short", false}, {"twelve chars", true}, {"ünïcödé-12ch", true}, {strings.Repeat("x", MaxPasswordBytes+1), false}} {
		if err := CheckPassword(tt.password); (err == nil) != tt.ok {
			t.Errorf("CheckPassword(%d bytes) = %v, want ok %v", len(tt.password), err, tt.ok)
		}
	}
	for _, tt := range []struct {
		name string
		ok   bool
	}{{"ada", true}, {"ada.lovelace@example.org", true}, {"Ada", false}, {"", false}, {"-ada", false}, {"a b", false},
		{strings.Repeat("a", 65), false}} {
		if err := CheckName(tt.name); (err == nil) != tt.ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// FuzzParsePHC: whatever a stored hash holds, parsing it does not panic,
// stays within the cost bounds, and what it accepts prints back as itself.
func FuzzParsePHC(f *testing.F) {
	good, _ := HashPassword("seed password", testHash)
	f.Add(good)
	f.Add("$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5")
	f.Add("$argon2id$v=19$m=1,t=1,p=1$$")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parsePHC(s)
		if err != nil {
			return
		}
		if h.params.MemoryKiB > maxMemoryKiB || h.params.Passes > maxPasses || h.params.Lanes == 0 {
			t.Fatalf("parsePHC(%q) accepted costs %+v", s, h.params)
		}
		if got := h.String(); got != s {
			t.Fatalf("parsePHC(%q).String() = %q", s, got)
		}
	})
}
