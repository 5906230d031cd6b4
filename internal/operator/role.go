package operator

import "fmt"

// Role is what an account may do in the console.
type Role string

// The roles.
const (
	// RoleViewer reads: searches mail, opens a mail's life, lists
	// suppressions and the audit log.
	RoleViewer Role = "viewer"
	// RoleOperator reads and acts: adds and removes suppressions (and
	// whatever action the console gains).
	RoleOperator Role = "operator"
)

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleViewer, RoleOperator:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want viewer or operator", s)
}

// CanAct reports whether the role may change anything.
func (r Role) CanAct() bool { return r == RoleOperator }
