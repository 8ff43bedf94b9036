//! The library's listing calls follow the router's pages (issue 12 item 9):
//! a listing longer than one page comes back whole from `Session::list`
//! and `Session::filter_list`.

mod common;

use std::collections::BTreeSet;

use common::all_servers;

#[test]
fn list_and_filter_list_merge_every_page() {
    // More than one default page (500 items, docs/admin.md).
    let n = 550;
    for (name, server) in all_servers() {
        let s = server.session();
        let subs: Vec<_> = (0..n)
            .map(|i| {
                s.subscribe(&format!("/paged/{i}/**"))
                    .filter(&format!("$.k == {i}"))
                    .receiver()
                    .expect("subscribe")
            })
            .collect();
        let listing = s.list().expect("list");
        let patterns: BTreeSet<&str> = listing
            .subscriptions
            .iter()
            .map(|x| x.pattern.as_str())
            .collect();
        assert_eq!(patterns.len(), n, "{name}: every subscription once");
        assert!(
            listing.next.is_none(),
            "{name}: the merged listing is whole"
        );
        let filters = s.filter_list().expect("filter_list");
        let ids: BTreeSet<u64> = filters.iter().map(|f| f.id).collect();
        assert_eq!(ids.len(), n, "{name}: every filter once");
        drop(subs);
    }
}
