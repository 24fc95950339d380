//! Pages of a list, the same way for the API and the console: a front end reads one item more than its
//! page, keeps the page, and gives a cursor after its last item only when that extra item came — so the
//! last page never offers an empty one after it.

/// Of `items`, read with one item more than `limit`, keeps `limit` and gives the cursor after the last
/// one kept, when there was more.
pub fn next_page<T, C>(items: &mut Vec<T>, limit: u32, cursor: impl FnOnce(&T) -> C) -> Option<C> {
    let limit = limit as usize;
    if items.len() <= limit {
        return None;
    }
    items.truncate(limit);
    items.last().map(cursor)
}

#[cfg(test)]
mod tests {
    use super::next_page;

    #[test]
    fn a_cursor_only_when_there_is_more() {
        let mut full = vec![1, 2, 3];
        assert_eq!(next_page(&mut full, 2, |last| *last), Some(2));
        assert_eq!(full, [1, 2]);
        let mut exact = vec![1, 2];
        assert_eq!(next_page(&mut exact, 2, |last| *last), None, "a full last page has no next one");
        assert_eq!(exact, [1, 2]);
    }
}
