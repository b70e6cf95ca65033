#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
fn main() {
    let mut v = Vec::new();
    for i in 0..100_000 { v.push(vec![0u8; 16 + i % 3000]); }
    let h: Vec<_> = (0..3).map(|i| std::thread::Builder::new().name(format!("worker-{i}")).spawn(|| { let x: Vec<Vec<u8>> = (0..1000).map(|_| vec![1; 100]).collect(); x.len() }).unwrap()).collect();
    for h in h { h.join().unwrap(); }
    println!("{}", frag::report());
    println!("{}", frag::report().to_json().len());
}
