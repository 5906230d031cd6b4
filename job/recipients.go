package job

import (
	"net/mail"

	"github.com/postline/postline/internal/mailaddr"
)

// Recipients returns the bare addresses (addr-spec, no display name) of
// To, then Cc, then Bcc, in order: a recipient's index in this list names
// it in the per-recipient state, in events and in return paths. An address
// that does not parse is kept as written; Validate refuses such jobs.
func (j *Job) Recipients() []string {
	out := make([]string, 0, len(j.To)+len(j.Cc)+len(j.Bcc))
	for _, list := range [][]string{j.To, j.Cc, j.Bcc} {
		for _, addr := range list {
			if _, spec, ok := mailaddr.Simple(addr); ok {
				addr = spec
			} else if a, err := mail.ParseAddress(addr); err == nil {
				addr = a.Address
			}
			out = append(out, addr)
		}
	}
	return out
}
