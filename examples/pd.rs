fn main() {
    use bsor_stream::{
        bsor,
        stream::{Profile, Settings},
        transcode,
    };
    let b = std::fs::read("../shared/corpus/sample1.bsor").unwrap();
    let r = bsor::parse(&b).unwrap();
    let s = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
    let t = std::time::Instant::now();
    for _ in 0..60 {
        let (r, _) = transcode::decode_replay(&s).unwrap();
        std::hint::black_box(bsor::to_vec(&r).unwrap());
    }
    eprintln!(
        "dec: {:.0} MB/s",
        60.0 * b.len() as f64 / t.elapsed().as_secs_f64() / 1e6
    );
}
