//! A play is the same play under small edits (`proto-spec/integrity.md` §11.4): a copy of
//! another player's replay with one event time moved by one ulp, with its info edited, or
//! with a few note times jittered, uploaded by a thief's token, is refused and kept for
//! review; honest repeats of the same map by other players are accepted.

use std::sync::Arc;

use bsor_stream_core::bsor::{self, BsorString, Replay};
use bsor_stream_core::integrity::fingerprint::eval::repeat;
use bsor_stream_server::{Config, Index, ReplayServer, Store, Uploaders};

use crate::replay_http;
use replay_http::*;

async fn open(dir: &std::path::Path) -> Arc<ReplayServer> {
    let store = Store::directory(&dir.join("store")).unwrap();
    let url = format!("sqlite://{}", dir.join("index.sqlite").display());
    let index = Index::open(&url).await.unwrap();
    ReplayServer::new(store, index, Config::default(), Uploaders::parse(TOKENS))
}

/// The owner's play, uploaded by p1: the server and its address, and the play.
async fn owned(
    dir: &std::path::Path,
    seed: u64,
) -> (Arc<ReplayServer>, std::net::SocketAddr, Replay) {
    let srv = open(dir).await;
    let addr = listen(srv.clone()).await;
    let p = play(seed, 20.0, "p1");
    let r = upload(addr, "tok1", &bsor::to_vec(&p).unwrap()).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    (srv, addr, p)
}

/// `p` as the thief p2 re-labels it.
fn stolen(p: &Replay) -> Replay {
    let mut s = p.clone();
    s.info.player_id = BsorString::new("p2");
    s.info.player_name = BsorString::new("thief");
    s
}

/// The thief's upload must be refused as the same or a similar play and kept for review;
/// the owner's replay stays the only one listed.
async fn refused_for_review(srv: &ReplayServer, addr: std::net::SocketAddr, copy: &Replay) {
    let r = upload(addr, "tok2", &bsor::to_vec(copy).unwrap()).await;
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    let code = r.json()["error"].as_str().unwrap().to_string();
    assert!(code == "similar-play" || code == "same-play", "{code}");
    let reviews = srv.reviews(10).await.unwrap();
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    assert_eq!(reviews[0].player, "p2");
    let all = request(addr, "GET", "/replays", &[], b"").await.json();
    let listed = all["replays"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["player"], "p1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_with_one_event_time_moved_by_one_ulp_is_reviewed() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, addr, p) = owned(dir.path(), 41).await;
    let mut copy = stolen(&p);
    let n = copy.notes.len() / 2;
    copy.notes[n].event_time = f32::from_bits(copy.notes[n].event_time.to_bits() + 1);
    refused_for_review(&srv, addr, &copy).await;
    let r = upload(addr, "tok2", &bsor::to_vec(&copy).unwrap()).await;
    assert_refusal(&r, 409, "similar-play");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_with_its_map_hash_and_difficulty_edited_is_reviewed() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, addr, p) = owned(dir.path(), 42).await;
    let mut copy = stolen(&p);
    copy.info.hash = BsorString::new("0123456789ABCDEF0123456789ABCDEF01234567");
    copy.info.difficulty = BsorString::new("Easy");
    copy.info.mode = BsorString::new("OneSaber");
    // An edit of one event too, so that the exact digest does not find it.
    copy.notes[3].event_time = f32::from_bits(copy.notes[3].event_time.to_bits() - 1);
    refused_for_review(&srv, addr, &copy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_with_a_few_note_times_jittered_is_reviewed() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, addr, p) = owned(dir.path(), 43).await;
    let mut copy = stolen(&p);
    for (k, i) in [2usize, 9, 17, 30, 44].into_iter().enumerate() {
        let i = i % copy.notes.len();
        let d = if k % 2 == 0 { 0.004 } else { -0.003 };
        copy.notes[i].event_time += d;
    }
    refused_for_review(&srv, addr, &copy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_repeats_of_one_map_by_other_players_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, addr, p) = owned(dir.path(), 44).await;
    for seed in 0..3u64 {
        let mut again = repeat(&p, 1000 + seed);
        again.info.player_id = BsorString::new("p2");
        let r = upload(addr, "tok2", &bsor::to_vec(&again).unwrap()).await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
    assert!(srv.reviews(10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_players_own_edited_copy_is_stored_as_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, addr, p) = owned(dir.path(), 45).await;
    let mut mine = p.clone();
    mine.notes[1].event_time = f32::from_bits(mine.notes[1].event_time.to_bits() + 1);
    let r = upload(addr, "tok1", &bsor::to_vec(&mine).unwrap()).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(srv.reviews(10).await.unwrap().is_empty());
}
