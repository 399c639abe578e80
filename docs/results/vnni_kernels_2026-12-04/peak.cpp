// Throughput of one 512-bit instruction kind per thread, 12 independent accumulators: vdpbf16ps,
// vpdpbusd and an fp32 FMA, on 1 and 2 threads. g++ -O2 -mavx512f -mavx512bw -mavx512bf16 -mavx512vnni -pthread peak.cpp
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
template<int OP> double run(long iters){
  __m512 a[12]; for(int i=0;i<12;i++) a[i]=_mm512_set1_ps(i*1e-9f);
  __m512bh w=(__m512bh)_mm512_set1_epi16(0x3f80), x=(__m512bh)_mm512_set1_epi16(0x3f00);
  __m512i wi=_mm512_set1_epi8(3), xi=_mm512_set1_epi8(2); __m512i ai[12]; for(int i=0;i<12;i++) ai[i]=_mm512_setzero_si512();
  __m512 wf=_mm512_set1_ps(1.0001f), xf=_mm512_set1_ps(0.9999f);
  auto t=std::chrono::steady_clock::now();
  for(long it=0;it<iters;it++){
    for(int i=0;i<12;i++){ if(OP==0) a[i]=_mm512_dpbf16_ps(a[i],w,x); else if(OP==1) ai[i]=_mm512_dpbusd_epi32(ai[i],wi,xi); else a[i]=_mm512_fmadd_ps(a[i],wf,xf);} 
    asm volatile(""::: "memory");
  }
  double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t).count();
  float sink=0; for(int i=0;i<12;i++){ sink+=_mm512_reduce_add_ps(a[i]) + _mm512_reduce_add_epi32(ai[i]);} if(sink==1.2345f) printf("x");
  return iters*12/s;
}
int main(){
  long it=20000000;
  const char* names[3]={"dpbf16","dpbusd","fma"};
  for(int threads=1;threads<=2;threads++) for(int op=0;op<3;op++){
    std::vector<double> r(threads); std::vector<std::thread> th;
    for(int i=0;i<threads;i++) th.emplace_back([&,i]{ r[i]= op==0?run<0>(it):op==1?run<1>(it):run<2>(it);});
    for(auto&t:th) t.join();
    double tot=0; for(double v:r) tot+=v;
    printf("%s threads %d: %.2f G instr/s total\n", names[op], threads, tot/1e9);
  }
}
