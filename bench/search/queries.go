package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The kinds of recipient search, taken in turn.
const (
	kindRare     = "rare address"
	kindCustomer = "recurring customer"
	kindBig      = "big domain"
	kindCompany  = "company domain"
	kindSmall    = "small domain"
)

var searchKinds = []string{kindRare, kindCustomer, kindBig, kindCompany, kindSmall}

// searchIndex is the index a kind's search must start from (migration
// 0021): every one, big domains too, walks its rows newest first.
func searchIndex(kind string) string {
	if kind == kindRare || kind == kindCustomer {
		return "postline_recipients_address_idx"
	}
	return "postline_recipients_domain_idx"
}

// bigDomains are bench_domain's five big domains.
var bigDomains = []string{"gmail.example", "yahoo.example", "outlook.example", "hotmail.example", "icloud.example"}

// picks are the values the timed and warm-up calls use.
type picks struct {
	// search holds, per kind, the Filter.Recipient values.
	search map[string][]string
	// lives are Message-IDs of mails with events.
	lives []string
}

// pick draws n values of every search kind and n mails with events from
// the seeded schema, with rng choosing the numbers and the case of each
// domain. Addresses are read from the recipients of random mails: the
// rare ones, the customers' (so a customer is picked as often as it gets
// mail, and the few with thousands of mails come up) and, for the small
// domains, their domains. Big and company domains are bench_domain's,
// Message-IDs bench_message_id's.
func pick(ctx context.Context, conn *pgx.Conn, rng *rand.Rand, o options, n int) (picks, error) {
	p := picks{search: map[string][]string{}}
	numbers := func(count, below, every int) []int64 {
		out := make([]int64, count)
		for i := range out {
			out[i] = int64(every) * (1 + rng.Int64N(int64(below/every)))
		}
		return out
	}
	var rare, customers, small []string
	// One recipient in ten is a customer, one in six at a small domain.
	for draws := 0; len(rare) < n || len(customers) < n || len(small) < n; draws++ {
		if draws == 10 {
			return p, fmt.Errorf("pick addresses: %d rare, %d customers' and %d at small domains of %d wanted in %d mails",
				len(rare), len(customers), len(small), n, 20*n*draws)
		}
		rows, err := conn.Query(ctx, `SELECT r.address FROM unnest($1::int8[]) AS s(i)
JOIN postline_recipients r ON r.message_id = bench_message_id(s.i)`, numbers(20*n, o.mails, 1))
		if err != nil {
			return p, fmt.Errorf("pick addresses: %w", err)
		}
		addresses, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return p, fmt.Errorf("pick addresses: %w", err)
		}
		for _, a := range addresses {
			switch {
			case strings.HasPrefix(a, "Customer."):
				customers = append(customers, a)
			case strings.HasPrefix(strings.ToLower(a[strings.LastIndexByte(a, '@')+1:]), "shop"):
				small = append(small, "@"+a[strings.LastIndexByte(a, '@')+1:])
				fallthrough // its address is as rare as any
			default:
				rare = append(rare, a)
			}
		}
	}
	for i := range n {
		p.search[kindRare] = append(p.search[kindRare], varyDomainCase(rng, rare[i]))
		p.search[kindCustomer] = append(p.search[kindCustomer], varyDomainCase(rng, customers[i]))
		p.search[kindBig] = append(p.search[kindBig], varyDomainCase(rng, "@"+bigDomains[rng.IntN(len(bigDomains))]))
		p.search[kindCompany] = append(p.search[kindCompany], varyDomainCase(rng, fmt.Sprintf("@corp%d.example", rng.IntN(200))))
		p.search[kindSmall] = append(p.search[kindSmall], varyDomainCase(rng, small[i]))
	}
	rows, err := conn.Query(ctx, `SELECT bench_message_id(i) FROM unnest($1::int8[]) AS s(i)`, numbers(n, o.mails, o.eventsEvery))
	if err != nil {
		return p, fmt.Errorf("pick mails: %w", err)
	}
	if p.lives, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return p, fmt.Errorf("pick mails: %w", err)
	}
	return p, nil
}

// varyDomainCase writes the domain of an address, or of "@domain", as an
// operator might type it: as stored, in lower case, capitalized or in
// capitals. The local part is kept: it is matched exactly.
func varyDomainCase(rng *rand.Rand, addr string) string {
	at := strings.LastIndexByte(addr, '@')
	local, domain := addr[:at+1], addr[at+1:]
	switch rng.IntN(4) {
	case 1:
		domain = strings.ToLower(domain)
	case 2:
		domain = capitalize(strings.ToLower(domain))
	case 3:
		domain = strings.ToUpper(domain)
	}
	return local + domain
}

// capitalize upper-cases the first letter of each dot-separated label.
func capitalize(domain string) string {
	labels := strings.Split(domain, ".")
	for i, l := range labels {
		if l != "" {
			labels[i] = strings.ToUpper(l[:1]) + l[1:]
		}
	}
	return strings.Join(labels, ".")
}
