package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/dkim"
)

// dkimRecord is one key's DNS record in postctl dkim record --output json.
type dkimRecord struct {
	Domain    string `json:"domain"`
	Selector  string `json:"selector"`
	Algorithm string `json:"algorithm"`
	Name      string `json:"name"`
	TXT       string `json:"txt"`
}

func newDKIMCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dkim",
		Short: "DKIM signing keys: the DNS records that publish them",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newDKIMRecordCmd(g))
	return cmd
}

func newDKIMRecordCmd(g *globals) *cobra.Command {
	var keys string
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Print the DNS TXT record of every DKIM key the workers sign with",
		Long: `Load the workers' DKIM keys, from --dkim-keys or POSTLINE_DKIM_KEYS in the same
domain=selector:keyfile,... form the worker reads, and print the TXT record that
publishes each public key, as a zone file line:

  s1._domainkey.example.com. IN TXT ( "v=DKIM1; k=rsa; p=MIIB..." )

A record value longer than 255 bytes (an RSA key of 2048 bits or more) is split
into the several strings DNS TXT records are made of. Publish each record before
the worker signs with the key: a receiver that cannot find it treats the
signature as failed. Only public keys are printed. A key file that does not load
fails the command (exit 1), naming the file, as it would stop the worker.
--output json prints [{"domain", "selector", "algorithm", "name", "txt"}], with
txt the record's value as one string.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := dkim.ParseKeys(keys)
			if err != nil {
				return usagef("--dkim-keys: %v", err)
			}
			if len(cfg.Keys) == 0 {
				return usagef("no DKIM keys: give --dkim-keys or set POSTLINE_DKIM_KEYS")
			}
			ring, err := dkim.Load(cfg)
			if err != nil {
				return err
			}
			var (
				records []dkimRecord
				lines   []string
			)
			for _, k := range ring.Keys() {
				records = append(records, dkimRecord{
					Domain: k.Domain(), Selector: k.Selector(), Algorithm: k.Algorithm(),
					Name: k.RecordName(), TXT: k.TXTRecord(),
				})
				lines = append(lines, k.ZoneRecord())
			}
			return g.print(records, strings.Join(lines, "\n"))
		},
	}
	cmd.Flags().StringVar(&keys, "dkim-keys", "", "the keys, domain=selector:keyfile,... (env POSTLINE_DKIM_KEYS)")
	return cmd
}
